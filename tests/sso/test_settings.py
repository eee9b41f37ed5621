"""The SSO settings fail loudly at start-up (portal/settings.py, the single sign-on block)."""

from __future__ import annotations

import pytest

from tests.test_settings import boot


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"FATIA_AUTH_PROXY": "True"},
            "FATIA_AUTH_PROXY is on: set FATIA_AUTH_PROXY_TRUSTED_CIDRS to the proxy's addresses",
        ),
        (
            {"FATIA_AUTH_PROXY": "True", "FATIA_AUTH_PROXY_TRUSTED_CIDRS": "127.0.0.1/32,10.0.0.0/33"},
            "FATIA_AUTH_PROXY_TRUSTED_CIDRS: '10.0.0.0/33' is not an address range like 10.128.0.0/14.",
        ),
        (
            {"FATIA_LOCAL_LOGIN": "False"},
            "FATIA_LOCAL_LOGIN is False but neither FATIA_OIDC_ISSUER nor FATIA_AUTH_PROXY is set",
        ),
        (
            {"FATIA_OIDC_ISSUER": "https://sso.example.test/realms/x"},
            "FATIA_OIDC_ISSUER is set: set FATIA_OIDC_CLIENT_ID",
        ),
        ({"FATIA_OIDC_ISSUER": "sso.example.test", "FATIA_OIDC_CLIENT_ID": "c"}, "FATIA_OIDC_ISSUER must be a URL"),
        (
            {"FATIA_AUTH_PROXY_USER_HEADER": "X-User: evil"},
            "FATIA_AUTH_PROXY_USER_HEADER must be a header name like X-Forwarded-User",
        ),
    ],
)
def test_a_broken_sso_setting_stops_the_portal_with_a_message(env: dict[str, str], message: str):
    # when
    result = boot(DEBUG="True", **env)
    # then
    assert result.returncode == 1
    assert message in result.stderr


def test_sso_settings_that_fit_together_start(tmp_path):
    # given
    secret = tmp_path / "oidc-secret"
    secret.write_text("s3cret\n")
    # when
    result = boot(
        DEBUG="True",
        FATIA_OIDC_ISSUER="https://sso.example.test/realms/company/",
        FATIA_OIDC_CLIENT_ID="fatia",
        FATIA_OIDC_CLIENT_SECRET_FILE=str(secret),
        FATIA_LOCAL_LOGIN="False",
        FATIA_AUTH_PROXY="True",
        FATIA_AUTH_PROXY_TRUSTED_CIDRS="127.0.0.1/32, fd00::/8",
    )
    # then
    assert (result.returncode, result.stdout.strip()) == (0, "ok")
