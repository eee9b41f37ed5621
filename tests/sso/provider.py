"""A real OpenID Connect provider for the tests: oidc-provider-mock (a dev dependency) in its own process on a free
loopback port. Users and their claims are set through its API (PUT /users/<sub>); its sign-in page asks for the
subject. It does not enforce PKCE (0.3.4): the tests check the challenge the portal sends instead.

Also a few helpers to walk the authorization-code flow without a browser.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Provider:
    issuer: str

    def set_user(self, sub: str, **claims: Any) -> None:
        """Create or replace a user at the provider with these claims (groups, email, preferred_username...)."""
        response = requests.put(f"{self.issuer}/users/{sub}", json=claims, timeout=10)
        assert response.status_code == 204, response.text

    def authorize(self, authorization_url: str, sub: str) -> str:
        """Sign `sub` in on the provider's page (as the form does) and return where it sends the browser back."""
        response = requests.post(authorization_url, data={"sub": sub}, allow_redirects=False, timeout=10)
        assert response.status_code == 302, response.text
        return str(response.headers["Location"])

    def id_token(self, *, client_id: str, sub: str, nonce: str, redirect_uri: str = "http://testserver/cb") -> str:
        """An ID token the provider really signed for `sub` (the code flow, run by hand)."""
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": "openid email profile",
            "state": "s",
            "nonce": nonce,
        }
        back = self.authorize(
            requests.Request("GET", f"{self.issuer}/oauth2/authorize", params=query).prepare().url or "", sub
        )
        code = parse_qs(urlsplit(back).query)["code"][0]
        response = requests.post(
            f"{self.issuer}/oauth2/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "client_id": client_id,
                "client_secret": "any",
            },
            timeout=10,
        )
        assert response.status_code == 200, response.text
        return str(response.json()["id_token"])


@contextlib.contextmanager
def running_provider() -> Iterator[Provider]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"oidc-provider-mock did not start on port {port}")
            time.sleep(0.1)
        yield Provider(issuer)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def callback_path(location: str) -> str:
    """The portal-relative part of the provider's redirect back (path and query), for Django's test client."""
    parts = urlsplit(location)
    return f"{parts.path}?{parts.query}"
