"""``abm_provider.hooks.settings``: a connection's request settings, read without a server.

Defaults, the auth header, hook arguments over the connection's extra, the form's keys, and a bad or
unknown setting refused naming the setting and the connection; no setting is named like a secret.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from abm_provider.hooks.settings import AbmSettings, Limits
from support.abm_connections import KEY, abm_connection


def test_settings_defaults_and_bearer() -> None:
    settings = AbmSettings.from_connection(abm_connection(host=None))
    assert settings.base_url == "https://api.terminusplatform.com"
    assert settings.limits == Limits()
    limits = settings.limits
    assert (limits.max_attempts, limits.retry_max_wait, limits.request_timeout) == (5, 60.0, 60.0)
    assert settings.verify is True
    assert settings.auth_header() == {"Authorization": f"Bearer {KEY}"}
    assert KEY not in repr(settings)


def test_hook_arguments_win_over_extra_and_form_keys_are_read() -> None:
    conn = abm_connection(
        **{
            "extra__abm__max_attempts": "7",
            "retry_max_wait": 12,
            "request_timeout": "",
            "verify": "/etc/ca.pem",
        }
    )
    settings = AbmSettings.from_connection(conn, request_timeout=3)
    limits = settings.limits
    assert (limits.max_attempts, limits.retry_max_wait, limits.request_timeout) == (7, 12.0, 3.0)
    assert settings.verify == "/etc/ca.pem"
    assert AbmSettings.from_connection(conn, max_attempts=2).limits.max_attempts == 2
    assert AbmSettings.from_connection(abm_connection(verify="false")).verify is False


def test_no_connection_setting_is_named_like_a_secret() -> None:
    """Airflow hides the value of every extra whose name looks sensitive, in the UI, the API and logs."""
    from airflow.sdk._shared.secrets_masker import should_hide_value_for_key

    import abm_provider

    conn_type = next(t for t in abm_provider.get_provider_info()["connection-types"] if t["conn-fields"])
    masked = [name for name in conn_type["conn-fields"] if should_hide_value_for_key(name)]
    assert masked == []


def test_a_setting_the_hooks_do_not_know_is_refused_by_name() -> None:
    """Old names (``max_wait``, ``timeout``) are not aliases: a typo must not pass unnoticed."""
    from abm_provider.hooks.abm import AbmAsyncHook, AbmHook

    for hook in (AbmHook, AbmAsyncHook):
        with pytest.raises(TypeError, match=r"got unknown settings \['max_wait', 'timeout'\]"):
            hook(max_wait=3, timeout=4)
    assert AbmHook(retry_max_wait=3).hook_params == {"retry_max_wait": 3}


def test_basic_auth_sends_the_key_as_user_name() -> None:
    settings = AbmSettings.from_connection(abm_connection(auth_type="Basic"))
    token = settings.auth_header()["Authorization"].removeprefix("Basic ")
    assert base64.b64decode(token).decode() == f"{KEY}:"


@pytest.mark.parametrize(
    ("extra", "kwargs", "words"),
    [
        ({"max_attempts": "many"}, {}, "max_attempts must be a whole number"),
        ({"max_attempts": 0}, {}, "max_attempts must be between 1 and"),
        ({}, {"retry_max_wait": -1}, "retry_max_wait must be between 0 and"),
        ({}, {"retry_max_wait": float("inf")}, "retry_max_wait must be between 0 and"),
        ({"request_timeout": 0}, {}, "request_timeout must be between 0.01 and"),
        ({"auth_type": "digest"}, {}, "auth_type must be 'bearer' or 'basic'"),
        ({"verify": 3}, {}, "verify must be true, false or a CA bundle path"),
    ],
)
def test_bad_settings_name_the_setting_and_connection(
    extra: dict[str, Any], kwargs: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValueError, match=words) as info:
        AbmSettings.from_connection(abm_connection(**extra), **kwargs)
    assert "abm_test" in str(info.value)


def test_missing_key_is_reported() -> None:
    with pytest.raises(ValueError, match="no API key"):
        AbmSettings.from_connection(abm_connection(password=None))
