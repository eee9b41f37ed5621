"""The three what-if answers on fleets small enough to check by hand (allocations/planning/, issue 14).

H100: 7 compute slices, 8 memory slots; 1g.10gb (1, 1) at any slot 0-6, 3g.40gb (3, 4) at 0 or 4, 4g.40gb (4, 4)
at 0, 7g.80gb (7, 8) at 0.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandMix
from allocations.mig.fleet import Fleet, Gpu, Instance, Node
from allocations.planning.add_gpus import added_nodes, what_if_add_gpus
from allocations.planning.answers import new_limits
from allocations.planning.mix import GpuMix, best_mix
from allocations.planning.quota import Limits, Queued, TenantQuota, quota_room, what_if_quota
from allocations.planning.replay import Ask, Capacity, Served
from allocations.queue_order import Waiting

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
OFFERED = ["1g.10gb", "3g.40gb", "7g.80gb"]
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MIX = DemandMix.from_shares({"1g.10gb": 1.0, "3g.40gb": 1.0, "7g.80gb": 1.0})


def fleet(*layouts: list[Instance]) -> Fleet:
    """One node, one GPU per layout."""
    return Fleet([Node("n0", [Gpu("n0", i, H100, list(layout)) for i, layout in enumerate(layouts)], "p")])


# --- add GPUs ---------------------------------------------------------------------------------------------------


def test_adding_a_gpu_to_a_full_pool_serves_the_queue_head_and_a_refused_request():
    # given: the pool's only GPU is taken whole; a 3g and a 7g wait, a 2 x 1g was refused
    full = fleet([Instance("7g.80gb", 0, "a1")])
    queued = [Ask("q1", 1, "3g.40gb", 1), Ask("q2", 2, "7g.80gb", 1)]
    refused = [Ask("r1", 1, "1g.10gb", 2)]
    # when
    answer = what_if_add_gpus(
        full,
        pool="p",
        offered=OFFERED,
        model=H100,
        count=1,
        gpus_per_node=8,
        queued=queued,
        refused=refused,
        demand=MIX,
    )
    # then: the new GPU takes the 3g (first in line); the 7g no longer fits beside it, the 2 x 1g does
    assert answer.before == Capacity(1, 0, 7, 7, 8, 8, {"1g.10gb": 0, "3g.40gb": 0, "7g.80gb": 0})
    assert answer.after == Capacity(2, 1, 14, 7, 16, 8, {"1g.10gb": 7, "3g.40gb": 2, "7g.80gb": 1})
    assert (answer.gpus_added, answer.nodes_added) == (1, 1)
    assert answer.queued_before == Served(2, 2, 0, 0)
    assert answer.queued_after == Served(2, 2, 1, 1)
    assert answer.refused_before == Served(1, 2, 0, 0)
    assert answer.refused_after == Served(1, 2, 1, 2)
    assert answer.after.compute_free == 7 and answer.after.memory_free == 8


def test_new_gpus_fill_nodes_of_the_size_asked_the_last_one_holds_the_rest():
    nodes = added_nodes(H100, 10, 4, "p")
    assert [len(n.gpus) for n in nodes] == [4, 4, 2]
    assert [n.name for n in nodes] == ["what-if-node-1", "what-if-node-2", "what-if-node-3"]


def test_a_request_for_more_gpus_than_a_node_has_is_not_served_by_small_nodes():
    # given: an empty pool; a request for 4 whole GPUs (one node) was refused
    empty = Fleet([])
    refused = [Ask("r1", 1, "7g.80gb", 4)]
    # when: 4 GPUs on nodes of 2, or on one node of 4
    small = what_if_add_gpus(
        empty, pool="p", offered=OFFERED, model=H100, count=4, gpus_per_node=2, queued=[], refused=refused, demand=MIX
    )
    big = what_if_add_gpus(
        empty, pool="p", offered=OFFERED, model=H100, count=4, gpus_per_node=4, queued=[], refused=refused, demand=MIX
    )
    # then
    assert small.refused_after.served_requests == 0
    assert big.refused_after.served_requests == 1


# --- quota ------------------------------------------------------------------------------------------------------


def test_quota_room_respects_both_limits_and_the_profile_cap():
    quota = TenantQuota(Limits(20, 20), 0, 0, caps={"1g.10gb": 3}, held={"1g.10gb": 2})
    assert quota_room(H100, quota, quota.limits, "1g.10gb") == 1
    assert quota_room(H100, quota, Limits(6, 20), "3g.40gb") == 2
    assert quota_room(H100, quota, Limits(20, 7), "3g.40gb") == 1  # memory binds: 7 // 4


def test_doubling_a_quota_shows_the_bounds_the_queue_order_and_the_pending_requests():
    # given: a 4g of another tenant on the GPU: 3 compute slices and slots 4-7 free (one 3g or three 1g)
    pool = fleet([Instance("4g.40gb", 0, "x1")])
    # tenant 1 holds (3, 4) of (4, 4): its queued 3g; tenant 2's queued 3g waited longer
    quota = TenantQuota(Limits(4, 4), compute_used=3, memory_used=4, caps={}, held={"3g.40gb": 1})
    queue = [
        Queued(Ask("1", 1, "3g.40gb", 1), Waiting(1, 1, 0, T0 + timedelta(minutes=2), 3)),
        Queued(Ask("2", 2, "3g.40gb", 1), Waiting(2, 2, 0, T0 + timedelta(minutes=1), 3)),
    ]
    pending = [Ask("3", 1, "1g.10gb", 2)]
    # when: the quota doubles
    answer = what_if_quota(
        pool,
        pool="p",
        offered=OFFERED,
        model=H100,
        tenant_id=1,
        quota=quota,
        new_limits=Limits(8, 8),
        queue=queue,
        usage={1: 3.0, 2: 2.0},
        quotas={1: 4, 2: 4},
        pending=pending,
        demand=MIX,
    )
    # then: per profile, the smaller of quota room and what fits, and which binds
    rooms = {r.profile: (r.fits_now, r.more_before, r.bound_before, r.more_after, r.bound_after) for r in answer.rooms}
    assert rooms == {
        "1g.10gb": (3, 0, "quota", 3, "capacity"),
        "3g.40gb": (1, 0, "quota", 1, "both"),
        "7g.80gb": (0, 0, "both", 0, "both"),
    }
    assert (answer.compute_free_in_pool, answer.memory_free_in_pool) == (3, 4)
    # shares 3/4 vs 2/4 put tenant 2 first; 3/8 puts tenant 1 first, and only one 3g fits
    assert (answer.share_before, answer.share_after) == (0.75, 0.375)
    assert (answer.queued, answer.queued_admitted_before, answer.queued_admitted_after) == (1, 0, 1)
    assert (answer.first_position_before, answer.first_position_after) == (2, 1)
    assert (answer.others_queued, answer.others_admitted_before, answer.others_admitted_after) == (1, 1, 0)
    # the pending 2 x 1g fits the new quota but not the pool once the queue's 3g is in
    assert (answer.pending, answer.pending_within_quota_before, answer.pending_within_quota_after) == (1, 0, 1)
    assert answer.pending_placed_after == 0


def test_new_limits_double_by_default_take_explicit_limits_and_refuse_both():
    assert new_limits(Limits(14, 16), factor=None, compute=None, memory=None) == (Limits(28, 32), {})
    assert new_limits(Limits(14, 16), factor=1.5, compute=None, memory=None) == (Limits(21, 24), {})
    assert new_limits(Limits(14, 16), factor=None, compute=7, memory=None) == (Limits(7, 16), {})
    _, errors = new_limits(Limits(14, 16), factor=2.0, compute=7, memory=None)
    assert errors == {"factor": ["Give a factor or new limits, not both."]}
    _, errors = new_limits(Limits(14, 16), factor=0.0, compute=None, memory=None)
    assert errors == {"factor": ["The factor must be above 0 and at most 100."]}


# --- best mix ---------------------------------------------------------------------------------------------------


def test_the_best_mix_keeps_a_gpu_that_is_already_on_target():
    # given: half the requests are 3g, half 7g; two GPUs, one holding a 3g at slot 4
    pool = fleet([Instance("3g.40gb", 4, "a1")], [])
    mix = DemandMix.from_shares({"3g.40gb": 1.0, "7g.80gb": 1.0})
    # when
    answer = best_mix(pool, model=H100, offered=["3g.40gb", "7g.80gb"], mix=mix)
    # then: 2 GPUs x 7 slices at 5 slices a request: 2.8 requests, 1.4 of each: one 3g and one 7g
    assert answer.weights == {"3g.40gb": 0.5, "7g.80gb": 0.5}
    assert answer.demand == {"3g.40gb": 1, "7g.80gb": 1}
    assert answer.target == [GpuMix({"3g.40gb": 1}, 1), GpuMix({"7g.80gb": 1}, 1)]
    assert (answer.served_compute, answer.demand_compute, answer.optimal) == (10, 10, True)
    assert answer.current == [GpuMix({}, 1), GpuMix({"3g.40gb": 1}, 1)]
    # the 3g's GPU is on target; the empty one needs its 7g created
    assert (answer.gpus_on_target, answer.gpus_without_moves, answer.moves, answer.creates) == (1, 2, 0, 1)


def test_the_distance_counts_a_held_slice_in_the_way_of_the_target():
    # given: only whole GPUs are asked for, and the GPU holds a 1g at slot 3
    pool = fleet([Instance("1g.10gb", 3, "a1")])
    answer = best_mix(pool, model=H100, offered=["7g.80gb"], mix=DemandMix.from_shares({"7g.80gb": 1.0}))
    # then: the 1g must move for the 7g to be created
    assert answer.target == [GpuMix({"7g.80gb": 1}, 1)]
    assert (answer.gpus_on_target, answer.gpus_without_moves, answer.moves, answer.creates) == (0, 0, 1, 1)
