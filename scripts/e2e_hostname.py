"""Airflow ``hostname_callable`` for the e2e run: both Celery workers share this machine's host name,
so each is given its own (``ABM_E2E_HOSTNAME``) to tell from task-instance records which ran a task."""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("ABM_E2E_HOSTNAME") or socket.getfqdn()
