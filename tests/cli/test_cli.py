"""The `fatia` CLI against a real server (pytest-django's live_server) with real API tokens.

Most tests call `main([...])` in-process and read stdout/stderr; a few run `python -m allocations.cli`
as a subprocess to prove the entry point and that the CLI needs nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from allocations.cli import main
from allocations.models import Allocation
from tenants.models import ApiToken, AuditEvent
from tenants.services import create_api_token
from tests.conftest import World

Status = Allocation.Status
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass(frozen=True)
class Tokens:
    alice: str
    alice_read: str
    mallory: str
    charlie: str


@pytest.fixture(autouse=True)
def private_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own config file and none of the caller's FATIA_* or proxy settings."""
    path = tmp_path / "fatia" / "config.json"
    monkeypatch.setenv("FATIA_CONFIG", str(path))
    for name in ("FATIA_URL", "FATIA_TOKEN", "FATIA_TIMEOUT", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def server(transactional_db: None, live_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FATIA_URL", live_server.url)
    return str(live_server.url)


@pytest.fixture
def tokens(world: World) -> Tokens:
    def token(user: Any, scope: str) -> str:
        _, raw = create_api_token(user=user, name=f"{user.username}-{scope}", scope=scope, expires_at=None, actor=user)
        return raw

    return Tokens(
        alice=token(world.alice, "write"),
        alice_read=token(world.alice, "read"),
        mallory=token(world.mallory, "write"),
        charlie=token(world.charlie, "write"),
    )


@pytest.fixture
def fatia(capsys: pytest.CaptureFixture[str], server: str):
    """Run the CLI in-process: fatia(token, "list", "--json") -> Outcome."""

    def run(token: str | None, *argv: str) -> Outcome:
        capsys.readouterr()
        code = main([*(["--token", token] if token else []), *argv])
        out, err = capsys.readouterr()
        return Outcome(code, out, err)

    return run


def request_args(*, profile: str = "1g.10gb", count: str = "1", lease_hours: str = "8") -> list[str]:
    return [
        "request",
        "--pool",
        "h100",
        "--profile",
        profile,
        "--count",
        count,
        "--lease-hours",
        lease_hours,
        "--purpose",
        "fine-tune llama",
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_probe(world: World, tokens: Tokens, fatia):
    for args in (
        request_args(count="2"),
        request_args(profile="3g.40gb"),
        ["list"],
        ["show", "1"],
        ["approve", "2"],
        ["quota"],
        ["pools"],
        ["whoami"],
        request_args(count="0"),
        request_args(count="57"),
        ["token", "list"],
    ):
        r = fatia(tokens.alice, *args)
        print(args, r, file=sys.__stderr__)
    r = fatia(tokens.charlie, "show", "1")
    print(r, file=sys.__stderr__)
    r = fatia(tokens.alice_read, *request_args())
    print(r, file=sys.__stderr__)
