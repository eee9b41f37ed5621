"""``ours`` after issue 14: expected stranded compute plus an opening cost sized to the pool."""

from __future__ import annotations

import pytest

from allocations.mig.demand import DemandMix
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import Instance, PlacementRequest
from allocations.mig.policies import FragmentationAware

from .brute import model
from .test_placement import H100


def engine_with_a_used_gpu(gpus: int) -> PlacementEngine:
    """``gpus`` H100s, all empty but the last, which holds a 1g.20gb at slot 6; default mix."""
    fleet = empty_fleet(model(H100), gpus // 8, 8)
    fleet.nodes[-1].gpus[-1].instances = [Instance("1g.20gb", 6, "a")]
    return PlacementEngine(fleet, "ours", DemandMix())


def test_the_engine_sizes_the_opening_cost_to_its_fleet() -> None:
    # given engines on 8 and 64 GPUs, then opening a GPU costs 1.6 / GPUs of expected stranded compute
    assert isinstance(small := engine_with_a_used_gpu(8).policy, FragmentationAware)
    assert isinstance(large := engine_with_a_used_gpu(64).policy, FragmentationAware)
    assert (small.open_cost, large.open_cost) == (0.2, 0.025)
    # and the shared policy object is left alone
    assert FragmentationAware().open_cost == 0.0


def test_a_small_pool_fills_a_used_gpu_where_a_large_one_opens_a_new_gpu() -> None:
    # given a used GPU where 3g.40gb goes to slot 0 (rank 0.65: expected stranded change plus the best-fit
    # pull) and empty GPUs, where it goes to slot 4 (rank 0.49 before the opening cost)
    request = PlacementRequest("3g.40gb")
    # when the pool has 8 GPUs, then opening one costs 0.2 more and the used GPU wins
    d = engine_with_a_used_gpu(8).choose(request)
    assert d is not None and (d.node, d.gpu_index, d.start) == ("node-0000", 7, 0)
    # when it has 64 GPUs, then opening costs 0.025 and the first empty GPU takes it at slot 4
    d = engine_with_a_used_gpu(64).choose(request)
    assert d is not None and (d.node, d.gpu_index, d.start) == ("node-0000", 0, 4)


def test_ranks_are_the_expected_stranded_change_plus_the_opening_cost() -> None:
    # given the two GPUs of the case above, ranked directly by a policy sized for 8 GPUs
    engine = engine_with_a_used_gpu(8)
    policy = engine.policy
    assert isinstance(policy, FragmentationAware)
    geom = next(iter(engine._geoms.values()))  # noqa: SLF001 (the engine's compiled model)
    weights = DemandMix().weights(geom.model)
    i = geom.index["3g.40gb"]
    used = geom.named_key((("1g.20gb", 6, False),))
    empty_rank = policy.rank(geom, (), i, weights)
    used_rank = policy.rank(geom, used, i, weights)
    assert empty_rank is not None and used_rank is not None
    # then the empty GPU's rank carries the opening cost and marks the GPU as unused; the used one does not
    plain = FragmentationAware().rank(geom, (), i, weights)
    assert plain is not None
    assert empty_rank[0][0] == pytest.approx(plain[0][0] + 0.2, abs=1e-8) and empty_rank[0][1] == 1.0
    assert used_rank[0][1] == 0.0 and used_rank[0][0] < empty_rank[0][0]
