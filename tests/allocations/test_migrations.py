"""Migration 0005 gives requests withdrawn before any slice existed their own state (issue 9)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("allocations", "0004_placement_blocked_starts")]
AFTER = [("allocations", "0006_notification")]


@pytest.mark.django_db(transaction=True)
def test_0005_moves_withdrawn_requests_from_released_to_withdrawn_and_back():
    # given: the schema before 0005, a request withdrawn then (RELEASED with the withdrawal message) and one
    # released after it ran
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    user = apps.get_model("auth", "User").objects.create(username="old-alice")
    tenant = apps.get_model("tenants", "Tenant").objects.create(name="Old team", slug="old-team")
    pool = apps.get_model("allocations", "NodePool").objects.create(name="Old pool", slug="old", gpu_model="x")
    allocation = apps.get_model("allocations", "Allocation")
    common = {
        "tenant": tenant,
        "pool": pool,
        "requested_by": user,
        "profile": "1g.10gb",
        "count": 1,
        "lease_hours": 8,
        "purpose": "p",
        "compute_slices": 1,
        "memory_slices": 1,
        "status": "released",
    }
    withdrawn = allocation.objects.create(**common, status_message="Withdrawn before any slice was created.")
    released = allocation.objects.create(**common, status_message="Released.")
    try:
        # when
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        # then
        apps = executor.loader.project_state(AFTER).apps
        statuses = dict(apps.get_model("allocations", "Allocation").objects.values_list("pk", "status"))
        assert statuses == {withdrawn.pk: "withdrawn", released.pk: "released"}
        # when: back again
        executor = MigrationExecutor(connection)
        executor.migrate(BEFORE)
        apps = executor.loader.project_state(BEFORE).apps
        statuses = dict(apps.get_model("allocations", "Allocation").objects.values_list("pk", "status"))
        assert statuses == {withdrawn.pk: "released", released.pk: "released"}
    finally:
        latest = MigrationExecutor(connection)
        latest.migrate(latest.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_0007_gives_existing_pools_the_default_holder_pod_tolerations():
    # given: a pool made before 0007
    before = [("allocations", "0006_notification")]
    after = [("allocations", "0007_holder_pod")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    apps = executor.loader.project_state(before).apps
    pool = apps.get_model("allocations", "NodePool").objects.create(name="Old pool", slug="old", gpu_model="x")
    try:
        # when
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        # then: its holder pods tolerate the usual GPU node taint, as a new pool's do
        apps = executor.loader.project_state(after).apps
        assert apps.get_model("allocations", "NodePool").objects.get(pk=pool.pk).tolerations == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    finally:
        latest = MigrationExecutor(connection)
        latest.migrate(latest.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_0022_marks_held_the_queued_requests_whose_message_says_held():
    # given: before 0022, a request held by admission (queued, the phrase in its message), one queued for room, and
    # one that was held and has started since (its message moved on; an old phrase in a finished row is no hold)
    before = [("allocations", "0021_admission_hold")]
    after = [("allocations", "0022_allocation_held")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    apps = executor.loader.project_state(before).apps
    user = apps.get_model("auth", "User").objects.create(username="old-alice")
    tenant = apps.get_model("tenants", "Tenant").objects.create(name="Old team", slug="old-team")
    pool = apps.get_model("allocations", "NodePool").objects.create(name="Old pool", slug="old", gpu_model="x")
    allocation = apps.get_model("allocations", "Allocation")
    common = {"tenant": tenant, "pool": pool, "requested_by": user, "profile": "1g.10gb", "count": 1}
    common |= {"lease_hours": 8, "purpose": "p", "compute_slices": 1, "memory_slices": 1}
    said = "Waiting in Old pool's queue: held to keep room for larger requests: every placement would strand 1.0"
    held = allocation.objects.create(**common, status="queued", status_message=said)
    waiting = allocation.objects.create(**common, status="queued", status_message="Waiting: no free layout fits.")
    started = allocation.objects.create(**common, status="released", status_message=said)
    try:
        # when
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        # then: only the queued one with the phrase is held
        apps = executor.loader.project_state(after).apps
        marks = dict(apps.get_model("allocations", "Allocation").objects.values_list("pk", "held"))
        assert marks == {held.pk: True, waiting.pk: False, started.pk: False}
    finally:
        latest = MigrationExecutor(connection)
        latest.migrate(latest.loader.graph.leaf_nodes())
