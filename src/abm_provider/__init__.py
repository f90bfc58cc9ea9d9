"""Airflow provider for the Account Lists v2 and Export Jobs v1 API.

Kept import-light on purpose: Airflow calls :func:`get_provider_info` through the
``apache_airflow_provider`` entry point during every start-up and DAG parse, so this
module must not import Airflow, requests or pandas.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.2.0"

_INTEGRATION = "Account Based Marketing (ABM)"


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow's providers manager (hooks, operators, connection form)."""
    from abm_provider.hooks.connection_form import UI_FIELD_BEHAVIOUR, conn_fields

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
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
                "conn-fields": conn_fields(),
            }
        ],
    }
