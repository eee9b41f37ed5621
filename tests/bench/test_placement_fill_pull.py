"""bench/placement_fill_pull.py: ``ours-hold`` with a stronger best-fit pull until the pool's first release, then
``ours``' own."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from allocations.mig.demand import DemandLearner, DemandMix
from allocations.mig.engine import PlacementEngine
from allocations.mig.fleet import Fleet
from allocations.mig.policies import FragmentationAware, Policy
from bench.placement import Pod
from bench.placement_departures import replay_held
from bench.placement_fill_pull import FillPull, FillPullEngine

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
HOUR = 3600


def test_the_pull_is_the_fill_pull_until_the_first_release_then_ours() -> None:
    # given one H100 and three 1g pods, the first ending before the third arrives
    pods = [Pod("1g", 0, HOUR), Pod("1g", 10, 3 * HOUR), Pod("1g", 2 * HOUR, 4 * HOUR)]
    engines: list[FillPullEngine] = []
    pulls: list[float] = []

    def make(fleet: Fleet, policy: str | Policy, demand: DemandMix | DemandLearner) -> PlacementEngine:
        engines.append(FillPullEngine(fleet, policy, demand))
        return engines[-1]

    def arriving(k: int, engine: PlacementEngine) -> None:
        assert isinstance(engine.policy, FillPull)
        pulls.append(engine.policy.TIGHTNESS)

    # when ours-hold with a fill pull of 0.5 replays them
    replay_held(H100, 1, pods, FillPull(0.5), make_engine=make, arriving=arriving)
    # then the two pods of the fill see the pull of 0.5, the one after the first release ours' 0.1
    assert pulls == [0.5, 0.5, FragmentationAware.TIGHTNESS]
    # and the engine saw two requests before that release
    assert engines[0].fill_requests == 2
