"""Single sign-on tests: a real OpenID Connect provider (tests/sso/provider.py) and the portal set up to use it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.sso.provider import Provider, running_provider

CLIENT_ID = "fatia-portal"


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[Provider]:
    with running_provider() as provider:
        yield provider


@pytest.fixture
def sso(settings: Any, oidc_provider: Provider) -> Provider:
    """The portal signed up with the provider: SSO on, groups from the "groups" claim, "platform-admins" admins."""
    settings.FATIA_OIDC_ISSUER = oidc_provider.issuer
    settings.FATIA_OIDC_CLIENT_ID = CLIENT_ID
    settings.FATIA_OIDC_CLIENT_SECRET = "test-secret"
    settings.FATIA_OIDC_ADMIN_GROUPS = ["platform-admins"]
    return oidc_provider
