"""A cohort whose guarantees may not fit its pool is flagged on the cohort page and in the API (issue 15)."""

from __future__ import annotations

from django.test import Client

from allocations import services
from tests.cohorts.helpers import cohort_pool
from tests.conftest import World


def _guarantee(world: World, pool_id: int, tenant_id: int, compute: int, memory: int) -> None:
    services.set_tenant_quota(
        tenant_id=tenant_id, pool_id=pool_id, compute_slices_limit=compute, memory_slices_limit=memory,
        actor=world.root,
    )  # fmt: skip


def test_guarantees_past_what_mig_layouts_surely_hold_or_past_the_grid_are_flagged(world: World):
    # given: two H100s (14 compute / 16 memory); A guaranteed 7 / 8, B nothing
    pool, cohort = cohort_pool(world)
    api = world.client(world.root)
    page = Client()
    page.force_login(world.root)

    def warning() -> str:
        [row] = [c for c in api.get("/api/v1/cohorts/").json() if c["id"] == cohort.pk]
        html = page.get(f"/manage/pools/{pool.pk}/cohorts/").content.decode()
        assert (f'id="cohort-{cohort.pk}-overcommit"' in html) == bool(row["overcommit_warning"])
        return str(row["overcommit_warning"])

    # then: half the pool guaranteed fits
    assert warning() == ""
    # when: B is guaranteed the other GPU's grid: every slot of both GPUs is promised
    _guarantee(world, pool.pk, world.tenant_b.pk, 7, 8)
    # then: flagged: MIG layouts surely hold only 12 / 14 at once
    assert "may not fit the pool at once" in warning() and "12 / 14" in warning()
    # when: A is guaranteed more than the pool has
    _guarantee(world, pool.pk, world.tenant_a.pk, 21, 24)
    # then: over-committed outright
    assert "exceed the pool's 14 / 16 on 2 GPUs" in warning()
