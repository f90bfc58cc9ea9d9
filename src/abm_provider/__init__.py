"""Airflow provider for the Account Lists v2 and Export Jobs v1 API.

Kept import-light on purpose: Airflow calls :func:`get_provider_info` through the
``apache_airflow_provider`` entry point during every start-up and DAG parse, so this
module must not import Airflow, requests or pandas.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.2.0"

_INTEGRATION = "Account Based Marketing (ABM)"


#: How the standard connection form fields are shown for an ``abm`` connection. Airflow 3.3 shows
#: placeholders for the standard fields only; the extra fields show their defaults instead.
_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "login"],
    "relabeling": {"host": "Base URL", "password": "API key"},
    "placeholders": {
        "host": "https://api.terminusplatform.com",
        "password": "API key (sent as Authorization: Bearer <key>)",
        "port": "the Base URL's (443 for https)",
    },
}

#: Extra fields of an ``abm`` connection besides the request settings (``connection.Limits``).
#: Every field has a type without "null" alternatives the form would offer as a value, and a default
#: the form starts from (Airflow's form draws a field from the first non-null type of its schema).
_CONN_FIELDS: dict[str, Any] = {
    "auth_type": {
        "label": "Auth type",
        "description": "bearer: Authorization: Bearer <key>; basic: the key as the Basic user name.",
        "schema": {"type": "string", "enum": ["bearer", "basic"], "default": "bearer"},
    },
    "verify": {
        "label": "Verify TLS certificates",
        "description": "Check the server's certificate (on by default). Turn off only for a test server.",
        "schema": {"type": ["boolean", "null"], "default": True},
    },
    "ca_bundle": {
        "label": "CA bundle path",
        "description": "Path of a CA bundle file to trust instead of the system's, for a private CA.",
        "schema": {"type": ["string", "null"]},
    },
}


def _conn_fields() -> dict[str, Any]:
    from abm_provider.hooks._settings import conn_fields

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
        "asset-uris": [
            {
                "schemes": ["abm-warehouse"],
                "handler": "abm_provider.assets.sanitize_uri",
                "factory": "abm_provider.assets.warehouse_asset",
            },
            {"schemes": ["abm-export"], "handler": "abm_provider.assets.sanitize_export_uri"},
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
