"""Shared fixtures: the three users every endpoint is tested with, and a small GPU pool.

alice   member of tenant A
mallory manager of tenant A
charlie member of tenant B
root    platform admin (staff)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if not os.environ.get("FATIA_TEST_SERVICES"):
    raise RuntimeError(
        "The tests need the PostgreSQL and Redis servers that `make test` (deploy/test.sh) starts; "
        "run the suite through it, or export DATABASE_URL, CELERY_BROKER_URL, SECRET_KEY and FATIA_TEST_SERVICES=1."
    )

from django.contrib.auth.models import User  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from allocations import services  # noqa: E402
from allocations.models import Allocation, NodePool  # noqa: E402
from tenants.models import Membership, Tenant  # noqa: E402
from tests.factories import MembershipFactory, TenantFactory, UserFactory  # noqa: E402

if TYPE_CHECKING:
    from tests.allocations.faults import PrivateRedis

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(autouse=True)
def empty_cache() -> None:
    """Throttle counters and sign-in lockouts live in the shared cache (Redis): each test starts without any."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True, scope="session")
def static_files_looked_up_when_asked() -> Iterator[None]:
    """Each test client builds its own middleware chain, and WhiteNoise's middleware, when built, reads every file
    under STATIC_ROOT (about 180 after collectstatic) with its headers: 50 to 100 ms per client, minutes over the
    suite (a profile of tests/test_endpoint_matrix.py, 2026-12-01: half of its time). In autorefresh mode it looks a
    file up when one is asked for instead. No test checks WhiteNoise through a test client: tests/test_demo.py and
    tests/deploy/test_image.py fetch static files from real servers, which run as in production."""
    from django.test import override_settings

    with override_settings(WHITENOISE_AUTOREFRESH=True):
        yield


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """PBKDF2's deliberate slowness costs half a second per user; tests do not need it."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@dataclass
class World:
    tenant_a: Tenant
    tenant_b: Tenant
    alice: User
    mallory: User
    charlie: User
    root: User
    pool: NodePool

    def client(self, user: User | None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client


@pytest.fixture
def world(db: Any) -> World:
    return build_world()


@pytest.fixture
def redis_server(tmp_path: Path, settings: Any) -> Iterator[PrivateRedis]:
    """A private Redis that the test may stop and restart, as this process's Celery broker, with the short delays of
    the lose-no-work tests (tests/allocations/faults.py); killed afterwards."""
    # Imported here: only those tests need the faults' processes.
    from tests.allocations.faults import FAST, PrivateRedis, celery_app_on

    for name, value in FAST.items():
        setattr(settings, name, int(value))
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        with celery_app_on(server.url):
            yield server
    finally:
        server.kill()


def build_world() -> World:
    """The rows of the `world` fixture; for a module that builds them once (tests/test_endpoint_matrix.py)."""
    root = UserFactory(username="root", is_staff=True)
    tenant_a = TenantFactory(name="Team A", slug="team-a", auto_approve_max_compute_slices=2)
    tenant_b = TenantFactory(name="Team B", slug="team-b", auto_approve_max_compute_slices=2)
    alice = UserFactory(username="alice")
    mallory = UserFactory(username="mallory")
    charlie = UserFactory(username="charlie")
    MembershipFactory(user=alice, tenant=tenant_a, role=Membership.Role.MEMBER)
    MembershipFactory(user=mallory, tenant=tenant_a, role=Membership.Role.MANAGER)
    MembershipFactory(user=charlie, tenant=tenant_b, role=Membership.Role.MEMBER)
    pool = services.create_node_pool(name="H100 pool", slug="h100", gpu_model=H100, actor=root)
    for n in range(2):
        services.register_node(pool_id=pool.pk, name=f"h100-node-{n}", gpu_count=8, actor=root)
    for tenant in (tenant_a, tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=root
        )
    return World(tenant_a, tenant_b, alice, mallory, charlie, root, pool)


@contextlib.contextmanager
def celery_worker_process(**extra_env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker on the test database, consuming from the Redis broker the test runner started.
    The test must use a transactional database so the worker sees committed rows."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        **extra_env,
    }
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "--loglevel=WARNING"], env=env
    )
    try:
        yield worker
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


def wait_for_status(allocation_id: int, status: str, timeout: float = 120.0) -> Allocation:
    """Re-read the allocation until it reaches `status` or the timeout passes; returns the last read."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    while True:
        allocation = Allocation.objects.get(pk=allocation_id)
        if allocation.status == status or time.monotonic() > deadline:
            return allocation
        connection.close()
        time.sleep(0.2)
