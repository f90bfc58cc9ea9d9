"""Hostile servers against the hooks and the download: see ``servers.py`` and ``conftest.py``."""
