"""The WSGI dispatcher in front of Django for queued telemetry (allocations/nodeagent/api/lean.py): it answers the
agent's report without Django's middleware, byte for byte as the whole stack answers it (status, headers, JSON
body) for every outcome, and leaves everything else to Django."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import OperationalError, close_old_connections, connection

from allocations.models import Node
from allocations.nodeagent import ingest_queue, services
from allocations.nodeagent.api.lean import PATH, LeanTelemetry
from allocations.nodeagent.models import AgentCredential
from tests.nodeagent.payloads import T0, FakeNode

pytestmark = pytest.mark.django_db

Answer = tuple[str, list[tuple[str, str]], Any]


@pytest.fixture(autouse=True)
def test_transaction_kept() -> Iterator[None]:
    # As Django's test client: a request's start and end must not close the test's connection (its transaction).
    for signal in (signals.request_started, signals.request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (signals.request_started, signals.request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def tokens(world: Any, settings: Any) -> dict[str, str]:
    settings.FATIA_INGEST_QUEUE_URL = os.environ["CACHE_URL"]  # the test runner's Redis, emptied before each test
    return {
        name: services.issue_agent_credential(node_id=Node.objects.get(name=name).pk, actor=world.root)[1]
        for name in ("h100-node-0", "h100-node-1")
    }


class Django:
    """Django's own WSGI application, counting the requests it is handed."""

    def __init__(self) -> None:
        self.app = WSGIHandler()
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.calls += 1
        return self.app(environ, start_response)


def environ(body: bytes, authorization: str | None, **extra: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": PATH,
        "QUERY_STRING": "",
        "SCRIPT_NAME": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "localhost",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if authorization is not None:
        env["HTTP_AUTHORIZATION"] = authorization
    env.update(extra)
    return env


def call(app: Any, env: dict[str, Any]) -> Answer:
    seen: list[Any] = []
    body = app(env, lambda status, headers: seen.extend([status, headers]))
    try:
        content = b"".join(body)
    finally:
        body.close()
    try:
        parsed: Any = json.loads(content)
    except ValueError:
        parsed = content
    return seen[0], sorted(seen[1]), parsed


def both(body: bytes, authorization: str | None, **extra: str) -> tuple[Answer, Answer, int]:
    """The lean dispatcher's answer, the whole stack's to the same request, and how many of the lean one's went
    to Django."""
    django = Django()
    lean = call(LeanTelemetry(django), environ(body, authorization, **extra))
    return lean, call(WSGIHandler(), environ(body, authorization, **extra)), django.calls


def report(node: str = "h100-node-0", at: float = T0) -> bytes:
    return json.dumps(FakeNode(node).telemetry(at)).encode()


def test_a_report_is_queued_and_answered_as_the_whole_stack_answers_it(tokens):
    lean, stack, to_django = both(report(), f"Bearer {tokens['h100-node-0']}")
    assert to_django == 0
    assert lean == stack
    assert lean[0] == "202 Accepted" and lean[2] == {"queued": 1, "commands": 0}
    assert dict(lean[1])["X-Content-Type-Options"] == "nosniff"  # the security middleware's headers are there
    assert ingest_queue.backlog() == 2  # one from each


@pytest.mark.parametrize(
    "case", ["bad-json", "invalid", "unknown", "no-credential", "malformed", "revoked", "wrong-node", "backlog"]
)
def test_every_refusal_is_the_whole_stacks_and_queues_nothing(world, tokens, settings, case):
    body, authorization = report(), f"Bearer {tokens['h100-node-0']}"
    if case == "bad-json":
        body = b'{"node": "h100-node-0", '
    elif case == "invalid":
        payload = FakeNode("h100-node-0").telemetry(T0)
        payload["samples"][0]["seq"] = "one"
        body = json.dumps(payload).encode()
    elif case == "unknown":
        authorization = "Bearer fagent_nope_nope"
    elif case == "no-credential":
        authorization = None
    elif case == "malformed":
        authorization = "Bearer nope"
    elif case == "revoked":
        credential = AgentCredential.objects.get(node__name="h100-node-0")
        services.revoke_agent_credential(credential_id=credential.pk, actor=world.root)
    elif case == "wrong-node":
        body = report("h100-node-1")
    elif case == "backlog":
        settings.FATIA_INGEST_BACKLOG_MAX = 0

    lean, stack, to_django = both(body, authorization)

    assert to_django == 0
    assert lean == stack
    expected = {"bad-json": 400, "invalid": 400, "wrong-node": 403, "backlog": 503}.get(case, 401)
    assert lean[0].startswith(str(expected))
    assert ingest_queue.backlog() == 0


def test_a_refusal_is_logged_as_django_logs_it(tokens, caplog):
    with caplog.at_level("WARNING", logger="django.request"):
        both(b"{", f"Bearer {tokens['h100-node-0']}")
    lean, stack = [(r.levelname, r.getMessage(), r.status_code) for r in caplog.records if r.name == "django.request"]
    assert lean == stack == ("WARNING", f"Bad Request: {PATH}", 400)


def test_a_database_that_does_not_answer_is_the_stacks_503(tokens):
    # A credential Redis does not share yet is looked up in PostgreSQL, which is restarting.
    def refuse(*args: Any) -> None:
        raise OperationalError("the database system is starting up")

    with connection.execute_wrapper(refuse):
        lean, stack, to_django = both(report(), f"Bearer {tokens['h100-node-0']}")
    assert to_django == 0
    assert lean == stack
    assert lean[0].startswith("503") and dict(lean[1])["Retry-After"] == "5"
    assert ingest_queue.backlog() == 0


def test_a_known_credential_is_answered_from_the_shared_entry_as_the_first_time(tokens):
    # The first report looks the credential up and shares it; the second is checked in Redis alone.
    first, _, _ = both(report(at=T0), f"Bearer {tokens['h100-node-0']}")
    second, _, _ = both(report(at=T0 + 5), f"Bearer {tokens['h100-node-0']}")
    assert first[:2] == second[:2] and second[2] == {"queued": 1, "commands": 0}


@pytest.mark.parametrize(
    "extra",
    [
        {"REQUEST_METHOD": "GET"},
        {"QUERY_STRING": "x=%00"},
        {"CONTENT_TYPE": "application/x-www-form-urlencoded"},
        {"HTTP_HOST": "evil.example"},
        {"PATH_INFO": "/api/v1/agent/telemetry"},
    ],
    ids=["get", "query", "form", "host", "no-slash"],
)
def test_anything_else_is_left_to_django(tokens, extra):
    lean, stack, to_django = both(report(), f"Bearer {tokens['h100-node-0']}", **extra)
    assert to_django == 1
    assert lean[0] == stack[0]


def test_without_the_queue_django_applies_the_report_inline(tokens, settings):
    settings.FATIA_INGEST_QUEUE_URL = ""
    lean, _, to_django = both(report(), f"Bearer {tokens['h100-node-0']}")
    assert to_django == 1
    assert lean[0] == "200 OK"
