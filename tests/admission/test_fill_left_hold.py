"""The hold policy's fill-left rule in the portal (issue 14, allocations/mig/fill_left.py): a pool that holds requests,
with the rule on (by default the trusted 7g share; FATIA_HOLD_FILL_LEFT chooses), holds a request that would open an
empty GPU the whole-GPU requests still expected need, and says so; off, the same request is placed."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from allocations.models import Allocation, NodePool
from tests.admission.helpers import hold_on
from tests.conftest import World
from tests.queue.helpers import ask, small_pool

pytestmark = pytest.mark.django_db
Status = Allocation.Status
KEPT = re.compile(
    r"^Waiting in Queue pool fill's queue: held to keep room for larger requests: empty GPUs are kept for the "
    r"whole-GPU requests still expected while the pool fills \(about (\d+\.\d) x 7g\.80gb for 2 empty GPUs\); "
    r"placed at the latest at (\d\d:\d\d) UTC\. "
)


def filling_pool(world: World, *, nodes: int, whole: int, small: int) -> NodePool:
    """`nodes` empty H100s whose pool asked for `whole` whole GPUs and `small` 1g.10gb lately (released rows that never
    ran: no release, so the pool is still filling); admission on."""
    pool = small_pool(world, nodes=nodes, slug="fill")
    now = timezone.now()
    Allocation.objects.bulk_create(
        Allocation(
            tenant=world.tenant_b, pool=pool, requested_by=world.charlie, profile=profile, count=1, lease_hours=1,
            purpose="history", compute_slices=compute, memory_slices=memory, status=Status.RELEASED, ended_at=now,
        )
        for profile, compute, memory in [("7g.80gb", 7, 8)] * whole + [("1g.10gb", 1, 1)] * small
    )  # fmt: skip
    return hold_on(world, pool)


def half_whole_pool(world: World) -> NodePool:
    """Two empty H100s, whole GPUs and 1g.10gb asked for alike: the stranding rule does not hold a 1g.10gb there."""
    return filling_pool(world, nodes=2, whole=10, small=10)


def test_by_default_the_trusted_share_holds_a_4g_that_would_open_one_of_four_empty_gpus(world: World, settings):
    settings.FATIA_HOLD_FILL_LEFT = ""  # the policy's default: the trusted 7g share (adopted in session 14)
    # given: four empty H100s, four whole GPUs asked for in five requests
    pool = filling_pool(world, nodes=4, whole=40, small=10)
    # when: a 4g.40gb is asked for
    held = ask(world, pool, "4g.40gb")
    # then: held by the fill-left rule (about 4.0 x 7g still expected for the four empty GPUs)
    assert held.status == Status.QUEUED and held.held
    assert "x 7g.80gb for 4 empty GPUs" in held.status_message, held.status_message


def test_with_fill_left_on_a_request_that_would_open_an_empty_gpu_is_held_with_its_own_reason(world: World, settings):
    settings.FATIA_HOLD_FILL_LEFT = "raw"
    pool = half_whole_pool(world)
    # when: a 1g.10gb is asked for
    held = ask(world, pool, "1g.10gb")
    # then: held as a hold is (queued, a deadline, audited once), with the fill-left reason
    assert held.status == Status.QUEUED and held.held
    assert not held.placements.exists()
    assert held.held_until is not None
    match = KEPT.match(held.status_message)
    assert match is not None, held.status_message
    assert float(match.group(1)) >= 2.0
    assert match.group(2) == f"{held.held_until:%H:%M}"


def test_with_fill_left_off_the_same_request_is_placed(world: World, settings):
    settings.FATIA_HOLD_FILL_LEFT = "off"
    pool = half_whole_pool(world)
    placed = ask(world, pool, "1g.10gb")
    assert placed.status == Status.ACTIVE
    assert not placed.held


def test_a_whole_gpu_is_placed_and_a_request_next_to_it_is_not_held(world: World, settings):
    settings.FATIA_HOLD_FILL_LEFT = "raw"
    pool = half_whole_pool(world)
    # when: a 7g.80gb (never refused by the rule), then a 4g.40gb that opens the last empty GPU: under one more 7g is
    # expected for it
    whole = ask(world, pool, "7g.80gb")
    other = ask(world, pool, "4g.40gb", b=True)
    assert (whole.status, other.status) == (Status.ACTIVE, Status.ACTIVE)
