"""A small client for the emulator's own tests: one API key, the documented error body, paging."""

from __future__ import annotations

from typing import Any

import requests


class Api:
    """A thin client for one API key: ``api.post(path, json)`` returns the `requests.Response`."""

    def __init__(self, base_url: str, key: str) -> None:
        self.base_url = base_url
        self.key = key
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.session.get(self.base_url + path, timeout=30, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> requests.Response:
        return self.session.post(self.base_url + path, json=json, timeout=30, **kw)

    def folder(self, name: str = "Folder") -> str:
        response = self.post("/accountLists/v2/folders", {"folderName": name, "folderAccess": "PUBLIC"})
        assert response.status_code == 200, response.text
        return response.json()["folderId"]

    def account_list(self, name: str = "List", folder_id: str | None = None) -> str:
        response = self.post(
            "/accountLists/v2/accountLists", {"listName": name, "folderId": folder_id or self.folder()}
        )
        assert response.status_code == 200, response.text
        return response.json()["listId"]

    def job(self, export_type: str = "TACTIC_PERFORMANCE", schedule: str = "0 5 * * *") -> dict[str, Any]:
        response = self.post("/exports/v1/exportJobs", {"type": export_type, "schedule": schedule})
        assert response.status_code == 200, response.text
        return response.json()

    def executions(self, export_type: str = "TACTIC_PERFORMANCE", **params: Any) -> requests.Response:
        return self.get(f"/exports/v1/exportJobs/{export_type}/executions", params=params)

    def all_executions(self, export_type: str = "TACTIC_PERFORMANCE", **params: Any) -> list[dict[str, Any]]:
        """Follow nextPageToken to the end, as a client must."""
        found: list[dict[str, Any]] = []
        token = ""
        while True:
            response = self.executions(export_type, **params, **({"pageToken": token} if token else {}))
            assert response.status_code == 200, response.text
            body = response.json()
            found += body["exportJobExecutions"]
            token = body["nextPageToken"]
            if not token:
                return found


def error_of(response: requests.Response) -> dict[str, Any]:
    """The documented error body's inner object, checking its shape on the way."""
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == response.status_code
    assert isinstance(error["message"], str) and error["message"]
    return error


def violated_fields(response: requests.Response) -> list[str]:
    return [v["field"] for d in error_of(response).get("details", []) for v in d.get("fieldViolations", [])]
