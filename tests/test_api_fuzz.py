"""Fuzz every API operation against the live test server with schemathesis (issue 9).

The schema is read from the running server's /api/v1/schema/, and each operation is called with bounded,
derandomized examples, as alice (a member) and as mallory (a manager), each with a write token: schema-valid
input (random ids, and ids of real objects) and schema-violating input. A 5xx, an undocumented status, a
response body the schema does not describe, or invalid input that is accepted fails the test, with the
operation and the exact request in the message.

Generating the cases is most of the test's time (a profile, 2026-12-01: about two thirds of a role's run, the rest
the requests), and generation is derandomized, so both roles always got the same cases. They are now generated
once, by the first role that needs them, and sent again for the other one (a fresh copy each time; the path id of
the real-object variant is the role's own object). Every role still sends every case.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.servers.basehttp import WSGIServer
from django.db import connections
from django.test.testcases import LiveServerThread, QuietWSGIRequestHandler
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from allocations import services
from tenants.services import create_api_token
from tests.conftest import World

pytestmark = pytest.mark.django_db(transaction=True)

POSITIVE_EXAMPLES = 6
NEGATIVE_EXAMPLES = 4
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def real_ids(world: World) -> dict[str, int]:
    """Objects of tenant A for the path parameters, by the collection their path starts with."""
    pending, _ = services.request_allocation(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        profile="3g.40gb",
        count=1,
        lease_hours=8,
        purpose="pending",
        actor=world.alice,
    )
    change, _ = services.request_quota_change(
        tenant_id=world.tenant_a.pk,
        pool_id=world.pool.pk,
        compute_slices_limit=28,
        memory_slices_limit=32,
        justification="growth",
        actor=world.mallory,
    )
    spare, _ = create_api_token(user=world.alice, name="spare", scope="read", expires_at=None, actor=world.alice)
    from allocations.models import Quota
    from tenants.models import AuditEvent, Membership

    return {
        "allocations": pending.pk,
        "quota-changes": change.pk,
        "pools": world.pool.pk,
        "tenants": world.tenant_a.pk,
        "memberships": Membership.objects.get(user=world.alice).pk,
        "quotas": Quota.objects.get(tenant=world.tenant_a, pool=world.pool).pk,
        "audit-events": AuditEvent.objects.order_by("pk").values_list("pk", flat=True).first() or 1,
        "tokens": spare.pk,
    }


class SerialServerThread(LiveServerThread):
    """The live server on one thread that keeps its database connection. The fuzz sends one request at a time; the
    threaded live server started a thread, and with it a PostgreSQL connection, for each of them (a profile of
    session 6: 21 s of a role's 114 s of requests)."""

    def _create_server(self, connections_override: Any = None) -> WSGIServer:
        # A server without threads answers "Connection: close", so no client holds it on an idle connection.
        return WSGIServer((self.host, self.port), QuietWSGIRequestHandler, allow_reuse_address=False)

    def run(self) -> None:
        # This thread's own connection (connections are per thread) outlives its requests; closed when it ends.
        connection = connections["default"]
        connection.settings_dict = {**connection.settings_dict, "CONN_MAX_AGE": None}
        super().run()


@pytest.fixture(scope="module")
def server_url(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    thread = SerialServerThread("localhost", StaticFilesHandler)
    thread.daemon = True
    with django_db_blocker.unblock():
        thread.start()
        thread.is_ready.wait()
        if thread.error:
            raise thread.error
        yield f"http://localhost:{thread.port}"
        thread.terminate()


def collection_of(path: str) -> str:
    return path.removeprefix("/api/v1/").split("/", 1)[0]


# (operation, mode, examples, real-object variant) -> the cases hypothesis generated, never sent themselves.
GENERATED: dict[tuple[str, GenerationMode, int, bool], list[Any]] = {}


def generated(operation: Any, mode: GenerationMode, examples: int, **fixed: Any) -> list[Any]:
    """The derandomized cases for the operation; generated on first use, the same list afterwards."""
    key = (operation.label, mode, examples, bool(fixed))
    if key not in GENERATED:
        cases: list[Any] = []

        @settings(
            max_examples=examples,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode, **fixed))
        def collect(case: Any) -> None:
            cases.append(case)

        collect()
        GENERATED[key] = cases
    return GENERATED[key]


def fuzz(operation: Any, headers: dict[str, str], mode: GenerationMode, examples: int, **fixed: Any) -> None:
    checks = CHECKS + ([negative_data_rejection] if mode == GenerationMode.NEGATIVE else [])
    cases = generated(operation, mode, examples, **fixed)
    for number, template in enumerate(cases, 1):
        case = template.derive()
        case.path_parameters.update(fixed.get("path_parameters", {}))
        try:
            response = case.call(headers=headers, timeout=30)
            case.validate_response(response, checks=checks, headers=headers)
        except Exception as exc:
            exc.add_note(f"{operation.label}, {mode.value} case {number} of {len(cases)}: {case!r}")
            raise


@pytest.mark.parametrize("role", ["alice", "mallory"])
def test_every_operation_answers_within_its_schema(world: World, server_url: str, settings, role: str):
    # given: throttles far away (hundreds of calls a minute are the point here), real objects to address
    settings.FATIA_THROTTLE_RATES = {"user": "100000/min", "token": "100000/min", "anon": "100000/min"}
    user = getattr(world, role)
    _, raw = create_api_token(user=user, name="fuzz", scope="write", expires_at=None, actor=user)
    headers = {"Authorization": f"Bearer {raw}"}
    ids = real_ids(world)
    schema = schemathesis.openapi.from_url(f"{server_url}/api/v1/schema/", timeout=30)
    operations = [result.ok() for result in schema.get_all_operations()]
    # when / then
    for operation in operations:
        fuzz(operation, headers, GenerationMode.POSITIVE, POSITIVE_EXAMPLES)
        fuzz(operation, headers, GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES)
        if "{id}" in operation.path and collection_of(operation.path) in ids:
            known = {"path_parameters": {"id": ids[collection_of(operation.path)]}}
            fuzz(operation, headers, GenerationMode.POSITIVE, POSITIVE_EXAMPLES, **known)
