"""Airflow provider for the Account Lists v2 and Export Jobs v1 API.

Kept import-light on purpose: Airflow calls :func:`get_provider_info` through the
``apache_airflow_provider`` entry point during every start-up and DAG parse, so this
module must not import Airflow, requests or pandas.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_INTEGRATION = "Account Based Marketing (ABM)"


#: How the standard connection form fields are shown for an ``abm`` connection.
_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "login", "port"],
    "relabeling": {"host": "Base URL", "password": "API key"},
    "placeholders": {
        "host": "https://api.terminusplatform.com",
        "password": "API key (sent as Authorization: Bearer <key>)",
        "extra": '{"max_attempts": 5, "retry_max_wait": 60, "request_timeout": 60, "verify": true}',
    },
}

#: Extra fields of an ``abm`` connection besides the request settings (``connection.Limits``).
_CONN_FIELDS: dict[str, Any] = {
    "verify": {
        "label": "TLS verification",
        "description": "true (default), false, or the path of a CA bundle file.",
        "schema": {"type": ["boolean", "string", "null"]},
    },
    "auth_type": {
        "label": "Auth type",
        "description": "bearer (default): Authorization: Bearer <key>; basic: the key as Basic user name.",
        "schema": {"type": ["string", "null"], "enum": ["bearer", "basic", None]},
    },
}


def _conn_fields() -> dict[str, Any]:
    from abm_provider.connection import conn_fields

    return {**_CONN_FIELDS, **conn_fields()}


def ui_field_behaviour() -> dict[str, Any]:
    """The connection form in the hook-method form (``hidden_fields``...), for ``get_ui_field_behaviour``.

    Airflow 3.2+ reads the kebab-case metadata from :func:`get_provider_info` without importing the
    hook; older versions call the hook method. Both come from the one definition above.
    """
    return {key.replace("-", "_"): value for key, value in _UI_FIELD_BEHAVIOUR.items()}


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow's providers manager (hooks, operators, connection form)."""
    return {
        "package-name": "airflow-provider-abm",
        "name": _INTEGRATION,
        "description": "Account Lists v2 and Export Jobs v1: list sync, scheduled exports, warehouse loads.",
        "versions": [__version__],
        "integrations": [{"integration-name": _INTEGRATION, "tags": ["service"]}],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": ["abm_provider.hooks.abm"]}],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": [
                    "abm_provider.operators.account_lists",
                    "abm_provider.operators.exports",
                ],
            }
        ],
        "sensors": [{"integration-name": _INTEGRATION, "python-modules": ["abm_provider.sensors.exports"]}],
        "triggers": [{"integration-name": _INTEGRATION, "python-modules": ["abm_provider.triggers.exports"]}],
        "transfers": [
            {
                "source-integration-name": _INTEGRATION,
                "target-integration-name": "Common SQL",
                "python-module": "abm_provider.transfers.csv_to_sql",
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "abm_provider.hooks.abm.AbmHook",
                "hook-name": "ABM (Account Lists and Exports API)",
                "connection-type": "abm",
                "ui-field-behaviour": _UI_FIELD_BEHAVIOUR,
                "conn-fields": _conn_fields(),
            }
        ],
    }
