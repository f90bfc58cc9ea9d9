"""The ``abm`` connection's form in Airflow's UI: which standard fields show, and the extra fields.

One definition for both ways Airflow reads it: the provider info (:func:`abm_provider.get_provider_info`,
called at every start-up and DAG parse, so this module imports neither Airflow nor requests) and the
hook's ``get_ui_field_behaviour``.
"""

from __future__ import annotations

from typing import Any

from abm_provider.hooks.settings import limit_fields

#: How the standard connection form fields are shown for an ``abm`` connection. Airflow 3.3 shows
#: placeholders for the standard fields only; the extra fields show their defaults instead.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
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
_AUTH_FIELDS: dict[str, Any] = {
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


def conn_fields() -> dict[str, Any]:
    """Every extra field of the form: the authentication fields above, then the request settings."""
    return {**_AUTH_FIELDS, **limit_fields()}


def ui_field_behaviour() -> dict[str, Any]:
    """The connection form in the hook-method form (``hidden_fields``...), for ``get_ui_field_behaviour``.

    Airflow 3.2+ reads the kebab-case metadata from :func:`abm_provider.get_provider_info` without
    importing the hook; older versions call the hook method. Both come from the one definition above.
    """
    return {key.replace("-", "_"): value for key, value in UI_FIELD_BEHAVIOUR.items()}
