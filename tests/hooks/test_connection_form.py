"""``abm_provider.hooks.connection_form``: the ``abm`` connection form Airflow's providers manager builds.

The fields are relabelled (Base URL, API key), the login is hidden, and every request setting has a
widget of its own. ``tests/ui/test_connection_form.py`` fills the form in a browser.
"""

from __future__ import annotations


def test_providers_manager_builds_the_connection_form() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert manager.field_behaviours["abm"]["relabeling"] == {"host": "Base URL", "password": "API key"}
    assert "login" in manager.field_behaviours["abm"]["hidden_fields"]
    widgets = {k for k in manager.connection_form_widgets if k.startswith("extra__abm__")}
    from abm_provider.hooks.settings import Limits

    assert widgets == {f"extra__abm__{f}" for f in (*Limits.names(), "verify", "ca_bundle", "auth_type")}
