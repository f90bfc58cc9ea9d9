"""What a load's ``source`` names: an execution to download, a downloaded file, or ``"unloaded"``.

``ExecutionCsvToSqlOperator`` takes the sensor's XCom (an execution), the download operator's XCom
(a file with its digest and execution), a path or an ``ObjectStoragePath``, or the word
``"unloaded"``; a dict may arrive as JSON text when a non-native Jinja template rendered it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from abm_provider.compat import AirflowFailException

#: ``source`` meaning every completed execution of ``export_type`` that the ledger lacks.
UNLOADED = "unloaded"


def _decoded(source: Any) -> Any:
    """A dict XCom rendered through a non-native Jinja template arrives as JSON text."""
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return json.loads(source)
    return source


def execution_of(source: Any) -> Mapping[str, Any] | None:
    """The source when it is an execution (or its link) rather than a downloaded file."""
    source = _decoded(source)
    if not isinstance(source, Mapping) or source.get("path") or source.get("uri"):
        return None
    if source.get("downloadUri") or (source.get("id") and (source.get("exportId") or source.get("type"))):
        return source
    return None


def source_meta(source: Any) -> dict[str, Any]:
    """A downloaded file's ``path``, and the digest, execution, type and time its XCom carries."""
    source = _decoded(source)
    if isinstance(source, Mapping):
        path = source.get("path") or source.get("uri")
        if not path:
            raise AirflowFailException(f"source dict has no 'path': keys are {sorted(source)}")
        return {
            "path": path,
            "sha256": source.get("sha256"),
            "execution_id": source.get("execution_id") or source.get("executionId"),
            "export_type": source.get("export_type") or source.get("exportType") or source.get("type"),
            "update_time": source.get("update_time") or source.get("updateTime"),
        }
    if isinstance(source, str | os.PathLike):
        return {"path": source}
    raise AirflowFailException(f"source must be a dict, a path or an ObjectStoragePath, got {type(source)}")
