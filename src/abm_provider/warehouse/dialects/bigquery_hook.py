"""A common-sql hook for a ``google_cloud_platform`` connection when the Google provider is not installed.

Why: the loader and the list sync take any common-sql ``DbApiHook``. The Google provider's
``BigQueryHook`` is one, but the provider is a large install, and its ``get_records`` and ``run`` do
not honour ``BIGQUERY_EMULATOR_HOST``. This hook reads the same connection the same way (its extras
below) and its :meth:`BigQueryLoadHook.get_conn` gives a :class:`~.bigquery_session.SessionConnection`:
every statement of a load runs as a query job in one BigQuery session, so a transaction can span them.
Names are quoted in backquotes (``escape_word_format``), as BigQuery reads a double-quoted word as a
string, and ``sql_type_names`` says how BigQuery names the standard types it has no ``TEXT`` for: the
generic load path quotes and spells types as the hook says.

Credentials, from the connection's extras, each also accepted with the Google provider's older
``extra__google_cloud_platform__`` prefix:

- ``key_path``: a service account's JSON key file;
- ``keyfile_dict``: the same key as a JSON object, or as text holding one;
- ``is_anonymous``: no credentials (an emulator);
- none of these: Application Default Credentials (``google.auth.default()``: the environment's
  ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's login, or the metadata server of a GCP machine).

``project`` names the project jobs run in (else the key's or the environment's), ``scope`` the OAuth
scopes (comma-separated; ``cloud-platform`` by default), ``location`` where the jobs run (else where
the load's dataset is). The three key settings are exclusive, as in the Google provider. A legacy
P12 key, a secret manager key (``key_secret_name``) and impersonation are not supported here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from airflow.providers.common.sql.hooks.sql import DbApiHook

from abm_provider.warehouse.dialects.bigquery_session import SessionConnection

#: The Google provider's connection type, and the prefix of its older extras' names.
CONN_TYPE = "google_cloud_platform"
EXTRA_PREFIX = f"extra__{CONN_TYPE}__"
DEFAULT_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_TRUE = {"true", "1", "yes", "on"}


def extra_field(extras: Mapping[str, Any], name: str) -> Any:
    """The extra ``name``, or its prefixed form; ``None`` when neither is set or it is empty text."""
    for key in (name, EXTRA_PREFIX + name):
        value = extras.get(key)
        if value not in (None, ""):
            return value
    return None


def _flag(value: Any) -> bool:
    """An extra's boolean: ``true`` in JSON, or text such as ``"true"`` (a form's check box)."""
    return value is True or (isinstance(value, str) and value.strip().lower() in _TRUE)


def credentials_and_project(extras: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The credentials and project a ``google_cloud_platform`` connection's extras describe.

    Reads no network: a key is only parsed, and ``google.auth.default()`` looks at the environment
    (it may ask a metadata server when on a GCP machine).
    """
    import google.auth
    from google.auth.credentials import AnonymousCredentials
    from google.oauth2 import service_account

    scope = extra_field(extras, "scope")
    scopes = [s.strip() for s in str(scope).split(",") if s.strip()] if scope else list(DEFAULT_SCOPES)
    key_path = extra_field(extras, "key_path")
    keyfile = extra_field(extras, "keyfile_dict")
    anonymous = _flag(extra_field(extras, "is_anonymous"))
    given = [
        name
        for name, set_ in (("key_path", key_path), ("keyfile_dict", keyfile), ("is_anonymous", anonymous))
        if set_
    ]
    if len(given) > 1:
        raise ValueError(f"the connection's extras {', '.join(given)} are exclusive: set one of them")
    project = extra_field(extras, "project")
    credentials: Any
    if anonymous:
        credentials, found = AnonymousCredentials(), None
    elif key_path:
        if not str(key_path).endswith(".json"):
            raise ValueError(
                f"key_path {key_path!r}: only a JSON key file is supported (not a legacy P12 key)"
            )
        credentials = service_account.Credentials.from_service_account_file(str(key_path), scopes=scopes)
        found = credentials.project_id
    elif keyfile:
        info = json.loads(keyfile) if isinstance(keyfile, str) else dict(keyfile)
        credentials = service_account.Credentials.from_service_account_info(info, scopes=scopes)
        found = credentials.project_id
    else:
        credentials, found = google.auth.default(scopes=scopes)
    return credentials, str(project or found) if (project or found) else None


def bigquery_client(credentials: Any, project: str | None, location: str | None = None) -> Any:
    """A ``google.cloud.bigquery.Client``; it sends its requests to ``BIGQUERY_EMULATOR_HOST`` when set."""
    from google.cloud import bigquery

    if not project:
        raise ValueError(
            "no Google Cloud project: set the connection's extra 'project' (the credentials name none)"
        )
    return bigquery.Client(project=project, credentials=credentials, location=location)


def session_connection_for(hook: Any) -> SessionConnection:
    """A :class:`SessionConnection` for ``hook``: this module's hook, or the Google provider's.

    The Google provider's ``BigQueryHook`` is a ``DbApiHook`` too, but its ``get_records`` and ``run``
    run each statement alone (no transaction across them) and ignore ``BIGQUERY_EMULATOR_HOST``; its
    credentials and project are taken instead (``get_credentials_and_project_id``, and its
    ``location``). That path is written against the provider's documented methods but not tested
    here: the provider is not installed in this repository's environments.
    """
    if isinstance(hook, BigQueryLoadHook):
        return hook.session()
    credentials, project = hook.get_credentials_and_project_id()
    project = getattr(hook, "project_id", None) or project
    location = getattr(hook, "location", None)
    return SessionConnection(bigquery_client(credentials, project, location), location=location)


class BigQueryLoadHook(DbApiHook):
    """A ``google_cloud_platform`` connection as a common-sql hook whose connection is one BigQuery
    session (:class:`~.bigquery_session.SessionConnection`); positional ``?`` parameters.

    :param gcp_conn_id: the Airflow connection (``google_cloud_default`` when not given).
    :param location: where the jobs run; else the connection's extra ``location``, else where the
        first job's tables are.
    """

    conn_name_attr = "gcp_conn_id"
    default_conn_name = "google_cloud_default"
    conn_type = CONN_TYPE
    hook_name = "BigQuery (ABM loads)"
    supports_autocommit = False
    _placeholder = "?"
    #: Standard SQL types BigQuery names otherwise, for SQL written for any database (the generic
    #: load path); BIGINT, DECIMAL and TIMESTAMP are BigQuery's too.
    sql_type_names: ClassVar[Mapping[str, str]] = {
        "TEXT": "STRING",
        "VARCHAR": "STRING",
        "DOUBLE": "FLOAT64",
        "BOOLEAN": "BOOL",
    }

    def __init__(self, *args: Any, location: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.location = location

    @property
    def escape_word_format(self) -> str:
        """BigQuery quotes a name in backquotes (a double-quoted word is a string there); the
        connection's extra ``escape_word_format`` may say otherwise, as common-sql reads it."""
        given: str | None = self.__dict__.get("_escape_word_format")  # common-sql's, from the hook's kwargs
        if given is None:
            given = str(self.connection_extra.get("escape_word_format", "`{}`"))
            self.__dict__["_escape_word_format"] = given
        return given

    def get_credentials_and_project_id(self) -> tuple[Any, str | None]:
        """The connection's credentials and project (the Google provider's hooks have the same method)."""
        return credentials_and_project(self.get_connection(self.get_conn_id()).extra_dejson)

    def get_conn(self) -> SessionConnection:
        """A session as PEP 249 wants a connection: the first change to a table opens a transaction,
        which ``commit`` ends (common-sql's ``run``, the generic load path)."""
        return self.session(implicit_transactions=True)

    def session(self, *, implicit_transactions: bool = False) -> SessionConnection:
        """A new session; without ``implicit_transactions`` each statement commits by itself outside
        ``begin()`` and ``commit()`` (the BigQuery dialect opens its transactions itself)."""
        extras = self.get_connection(self.get_conn_id()).extra_dejson
        credentials, project = credentials_and_project(extras)
        location = self.location or extra_field(extras, "location")
        client = bigquery_client(credentials, project, location)
        return SessionConnection(client, location=location, implicit_transactions=implicit_transactions)

    def get_uri(self) -> str:
        """The connection as sqlalchemy-bigquery's URI, ``bigquery://<project>``: what common-sql builds
        an engine from when asked (with that package installed); this provider's loads never do."""
        project = extra_field(self.get_connection(self.get_conn_id()).extra_dejson, "project")
        if not project:
            raise ValueError(
                f"the connection {self.get_conn_id()!r} names no project: set its extra 'project', which a "
                "BigQuery URI needs"
            )
        return f"bigquery://{project}"
