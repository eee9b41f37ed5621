"""Concurrent provisioning in a shared pool never over-commits a GPU's memory: the pool's row lock serialises
placement (PostgreSQL, twenty threads, each its own connection)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django.db.models import Sum

from allocations import services
from allocations.models import Allocation, SlicePlacement
from tests.allocations.test_concurrency import run_in_parallel
from tests.sharing.conftest import Shared

pytestmark = pytest.mark.django_db(transaction=True)


def test_twenty_parallel_provisions_fill_the_gpus_and_never_over_commit_memory(shared: Shared) -> None:
    # given: 20 approved 8 GiB shares; 4 L4 GPUs of 23034 MiB take two each (8)
    assert connection.vendor == "postgresql"
    world = shared.world
    for tenant in (world.tenant_a, world.tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk,
            pool_id=shared.l4.pk,
            compute_slices_limit=1000,
            memory_slices_limit=1000,
            actor=world.root,
        )
    ids = []
    for i in range(20):
        tenant, user = (world.tenant_a, world.alice) if i % 2 else (world.tenant_b, world.charlie)
        allocation, _ = services.request_allocation(
            tenant_id=tenant.pk,
            pool_id=shared.l4.pk,
            profile="",
            memory_mib=8192,
            count=1,
            lease_hours=1,
            purpose=f"race {i}",
            actor=user,
        )
        if allocation.status == Allocation.Status.PENDING:
            manager = world.root
            allocation = services.approve_allocation(allocation_id=allocation.pk, actor=manager)
        ids.append(allocation.pk)

    # when
    outcomes = run_in_parallel(lambda i: services.provision_allocation(allocation_id=ids[i]).status)

    # then
    assert outcomes == Counter({"active": 8, "failed": 12})
    per_gpu = SlicePlacement.objects.filter(allocation__status="active").values("gpu_id").annotate(m=Sum("memory_mib"))
    assert len(per_gpu) == 4
    assert all(row["m"] == 2 * 8192 for row in per_gpu)
