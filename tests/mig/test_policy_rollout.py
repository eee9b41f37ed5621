"""``ours-rollout`` (issue 14): ``ours`` plus Monte-Carlo rollouts over the mix near the end of a fill.

Where the search is off (far from full, allocations ending) it must decide exactly as ``ours``; where it
is on it must never refuse what fits, keep layouts valid, be reproducible, and its choice must pay on
futures it did not simulate."""

from __future__ import annotations

import math
import random
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from allocations.mig.demand import DemandMix
from allocations.mig.engine import PlacementEngine, empty_fleet
from allocations.mig.fleet import PlacementDecision, PlacementRequest, SlotChoice
from allocations.mig.layout import LayoutKey, Option, geometry
from allocations.mig.policies import Rank, RolloutFragmentationAware, get_policy

from .brute import MODELS, max_more, model, valid_layouts
from .test_placement import H100

PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
# A fixed mix (no prior: the search trusts it) found by comparing both policies on random mixes.
SHARES = {"1g.10gb": 0.24, "1g.20gb": 0.71, "2g.20gb": 0.1, "3g.40gb": 0.36, "4g.40gb": 0.82, "7g.80gb": 0.14}


def where(d: PlacementDecision | None) -> tuple[str, int, int] | None:
    return None if d is None else (d.node, d.gpu_index, d.start)


def served_after(first: PlacementDecision, futures: int) -> float:
    """Mean compute slices ``ours`` serves on 4 H100s after a 3g.40gb and then ``first``, over independent
    futures from SHARES as long as the rollouts' (130 % of the free compute)."""
    mix = DemandMix.from_shares(SHARES)
    weights = list(SHARES.values())
    total = []
    for seed in range(futures):
        engine = PlacementEngine(empty_fleet(model(H100), 1, 4), "ours", mix)
        engine.place(PlacementRequest("3g.40gb"), "a")
        engine.commit(first, "b")
        used, capacity = engine.allocated_compute()
        mean = sum(w * model(H100).profile(p).compute_slices for p, w in SHARES.items()) / sum(weights)
        arrivals = math.ceil(1.3 * (capacity - used + 1) / mean)
        rng = random.Random(f"independent/{seed}")
        served = 0
        for k, name in enumerate(rng.choices(PROFILES, weights, k=arrivals)):
            if engine.place(PlacementRequest(name), f"f{k}") is not None:
                served += model(H100).profile(name).compute_slices
        total.append(served)
    return statistics.fmean(total)


def test_near_the_end_of_a_fill_its_choice_serves_more_on_futures_it_did_not_simulate() -> None:
    # given 4 H100s holding one 3g.40gb, under a known mix, so close to full that the search runs
    engines = {
        p: PlacementEngine(empty_fleet(model(H100), 1, 4), p, DemandMix.from_shares(SHARES))
        for p in ("ours", "ours-rollout")
    }
    for e in engines.values():
        e.place(PlacementRequest("3g.40gb"), "a")
    # when a 1g.10gb arrives
    plain = engines["ours"].choose(PlacementRequest("1g.10gb"))
    searched = engines["ours-rollout"].choose(PlacementRequest("1g.10gb"))
    assert plain is not None and searched is not None
    # then the search moves it away from ours' favourite
    assert where(plain) == ("node-0000", 0, 0)
    assert where(searched) == ("node-0000", 1, 4)
    # and on 200 other futures of the mix, ours serves more after the search's placement than after its own
    moved = PlacementDecision("node-0000", (SlotChoice("node-0000", 1, "1g.10gb", 4, False),), "x", ())
    mine = PlacementDecision("node-0000", (SlotChoice("node-0000", 0, "1g.10gb", 0, False),), "x", ())
    assert served_after(moved, 200) > served_after(mine, 200)


def test_the_search_runs_only_within_its_horizon_of_a_full_fleet() -> None:
    # given H100 fleets holding one 3g.40gb at slot 4, under a known mix
    geom = geometry(model(H100))
    one_3g = geom.key([(geom.profile_index("3g.40gb"), 4, False)])
    policy = get_policy("ours-rollout")
    assert isinstance(policy, RolloutFragmentationAware)
    mix = DemandMix.from_shares(SHARES)
    tables: dict[int, dict[LayoutKey, tuple[Rank, Option] | None]] = {}

    def search(gpus: int) -> tuple[LayoutKey, Option] | None:
        counts = {one_3g: 1, (): gpus - 1}
        return policy.search(
            geom,
            geom.profile_index("1g.10gb"),
            mix,
            counts,
            lambda q: tables.setdefault(q, {}),
            lambda key: 0 if key else 1,
        )

    # when a 1g.10gb arrives on 128 GPUs (about 420 arrivals from full), then the search stays out
    assert search(128) is None
    # when it arrives on 4 GPUs (about 12 arrivals from full), then it answers
    assert search(4) is not None
    # and with allocations ending at 0.2 per request, it stays out again
    assert (
        policy.search(
            geom,
            geom.profile_index("1g.10gb"),
            mix,
            {one_3g: 1, (): 3},
            lambda q: tables.setdefault(q, {}),
            lambda key: 0 if key else 1,
            0.2,
        )
        is None
    )


def test_a_pool_where_allocations_end_gets_ours_decisions() -> None:
    # given 4 H100s under a known mix (the search would run), where 20 allocations came and went
    engines = [
        PlacementEngine(empty_fleet(model(H100), 1, 4), p, DemandMix.from_shares(SHARES))
        for p in ("ours", "ours-rollout")
    ]
    for e in engines:
        for k in range(20):
            d = e.place(PlacementRequest("1g.10gb"), f"w{k}")
            assert d is not None
            e.release(d.node, d.gpu_index, d.start)
    # when requests arrive and every other one ends an allocation, then both decide alike
    rng = random.Random(7)
    for k, name in enumerate(rng.choices(PROFILES, list(SHARES.values()), k=60)):
        decisions = [e.place(PlacementRequest(name), f"r{k}") for e in engines]
        assert where(decisions[0]) == where(decisions[1])
        ended = where(decisions[0])
        if k % 2 and ended is not None:
            for e in engines:
                e.release(*ended)


OPS = st.lists(st.tuples(st.integers(0, 99), st.booleans()), max_size=25)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(MODELS), ops=OPS)
def test_it_places_every_request_that_fits_and_layouts_stay_valid(name: str, ops: list[tuple[int, bool]]) -> None:
    # given a 2-node x 2-GPU fleet of one of the four models, under a fixed mix (the search is on)
    m = model(name)
    profiles = [p.name for p in m.profiles]
    engine = PlacementEngine(
        empty_fleet(m, 2, 2), "ours-rollout", DemandMix.from_shares({profiles[-1]: 0.5, profiles[0]: 0.5})
    )
    gpus = [(f"node-{n:04d}", g) for n in range(2) for g in range(2)]
    for a, release in ops:
        # when placing and releasing at random
        profile = profiles[a % len(profiles)]
        layouts = [frozenset((i.profile, i.start) for i in engine.instances(*g)) for g in gpus]
        fits = any(max_more(name, lay, profile) > 0 for lay in layouts)
        decision = engine.place(PlacementRequest(profile), f"o{a}")
        # then a request is placed exactly when it fits
        assert (decision is not None) == fits
        if release:
            node, gpu = gpus[a % len(gpus)]
            held = [i for i in engine.instances(node, gpu) if i.owner is not None]
            if held:
                engine.release(node, gpu, held[0].start)
        # and every GPU's layout is valid
        for g in gpus:
            assert frozenset((i.profile, i.start) for i in engine.instances(*g)) in valid_layouts(name)


def test_it_is_deterministic() -> None:
    # given two engines on 8 H100s under the same known mix
    sequence = random.Random(3).choices(PROFILES, list(SHARES.values()), k=40)
    runs = []
    for _ in range(2):
        engine = PlacementEngine(empty_fleet(model(H100), 1, 8), "ours-rollout", DemandMix.from_shares(SHARES))
        # when both see the same requests (the search runs on most of them)
        runs.append([where(engine.place(PlacementRequest(p), f"r{k}")) for k, p in enumerate(sequence)])
    # then they take the same decisions
    assert runs[0] == runs[1]
