"""Paths: where task outputs go, how a user's path becomes an ``ObjectStoragePath``, and which are local.

The archive of an export, a rejects file and an account file are all given as a string, a local
path or an ``ObjectStoragePath``, on the local disk or an object store; these rules are written once
so that every reader and writer agrees on them.
"""

from __future__ import annotations

import os
import re

from airflow.sdk import ObjectStoragePath

#: fsspec protocols of the local file system, where ``os.replace`` gives an atomic rename.
LOCAL_PROTOCOLS = ("", "file", "local")
_UNSAFE_KEY_CHARS = re.compile(r"[^A-Za-z0-9._=-]+")


def as_storage_path(path: str | os.PathLike[str] | ObjectStoragePath) -> ObjectStoragePath:
    """Accept a string, a local path or an ``ObjectStoragePath``; make a local relative path absolute.

    A bare relative string would otherwise be resolved by fsspec against a working directory that
    differs between the scheduler, a worker and a test.
    """
    if isinstance(path, ObjectStoragePath):
        return path
    text = os.fspath(path)
    if "://" not in text:
        text = "file://" + os.path.abspath(text)
    return ObjectStoragePath(text)


def is_local(path: ObjectStoragePath) -> bool:
    """Whether the path is on the local file system, where ``os.replace`` gives an atomic rename."""
    return (path.protocol or "") in LOCAL_PROTOCOLS


def local_path(path: ObjectStoragePath) -> str:
    """The OS path of a local ``ObjectStoragePath``."""
    return str(path.path)


def safe_key(part: str) -> str:
    """Make a run id like ``manual__2026-01-01T00:00:00+00:00`` safe as a path segment on any store."""
    return _UNSAFE_KEY_CHARS.sub("_", part).strip("._") or "_"


def default_state_dir() -> str:
    """Where task outputs go when the DAG does not say: ``[abm] state_dir``, else ``$AIRFLOW_HOME/abm``."""
    from_env = os.environ.get("AIRFLOW__ABM__STATE_DIR")
    if from_env:
        return from_env
    from abm_provider.compat import airflow_conf

    configured = airflow_conf().get("abm", "state_dir", fallback=None)
    if configured:
        return str(configured)
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return os.path.join(home, "abm")
