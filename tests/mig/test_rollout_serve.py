"""The rollouts' inner loop (:func:`allocations.mig.rollout._serve`), sped up in session 13, must pick exactly what a
plain scan picks: per arrival the layout with the lowest rank, ties to the first in the fleet's order (a dict's
insertion order, where a layout that empties and comes back goes last), nothing when the profile fits nowhere. The
veto's decisions depend on it, so a change of choice anywhere would change which requests ``ours-hold`` holds."""

from __future__ import annotations

import random
from functools import partial

from allocations.mig import rollout
from allocations.mig.layout import Geometry, LayoutKey, geometry
from allocations.mig.policies import FragmentationAware, Rank

from .brute import model

MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A30")


def scan(
    policy: FragmentationAware, geom: Geometry, state: dict[LayoutKey, int], seq: list[int], weights: tuple[float, ...]
) -> tuple[int, list[LayoutKey | None]]:
    """The definition: every layout of the fleet ranked for every arrival."""
    served = 0
    picks: list[LayoutKey | None] = []
    for q in seq:
        best_rank: Rank | None = None
        best = None
        for key in state:
            r = policy.rank(geom, key, q, weights)
            if r is not None and (best_rank is None or r[0] < best_rank):
                best_rank, best = r[0], (key, r[1])
        picks.append(None if best is None else best[0])
        if best is not None:
            served += geom.compute[q]
            state[best[0]] -= 1
            if not state[best[0]]:
                del state[best[0]]
            state[best[1].after] = state.get(best[1].after, 0) + 1
    return served, picks


def table_of(tables: dict[int, rollout.RankTable], q: int) -> rollout.RankTable:
    return tables.setdefault(q, {})


def random_fleet(geom: Geometry, rng: random.Random, gpus: int) -> dict[LayoutKey, int]:
    """GPUs per layout after a few random placements each (some GPUs left empty, so that ranks tie)."""
    fleet: dict[LayoutKey, int] = {}
    for _ in range(gpus):
        key: LayoutKey = ()
        for _ in range(rng.randrange(4)):
            options = geom.options(key, rng.randrange(len(geom.profiles)))
            if options:
                key = rng.choice(options).after
        fleet[key] = fleet.get(key, 0) + 1
    return fleet


def test_the_rollouts_serve_exactly_what_a_plain_scan_serves_on_random_fleets_mixes_and_arrivals() -> None:
    rng = random.Random(13)
    checked = ties = full = 0
    for case in range(24):
        geom = geometry(model(MODELS[case % len(MODELS)]))
        raw = [rng.random() ** 2 for _ in geom.profiles]
        weights = tuple(round(w / sum(raw), 2) for w in raw)
        policy = FragmentationAware(open_cost=rng.choice((0.0, 0.025, 0.2)))
        fleet = random_fleet(geom, rng, rng.randrange(1, 16))
        seq = rng.choices(range(len(geom.profiles)), raw, k=rng.randrange(5, 100))
        tables: dict[int, rollout.RankTable] = {}
        expected = dict(fleet)
        served, picks = scan(policy, geom, expected, seq, weights)
        state = dict(fleet)
        assert rollout._serve(policy, geom, state, seq, weights, partial(table_of, tables)) == served
        assert list(state.items()) == list(expected.items())  # same multiset, same order
        checked += len(seq)
        full += picks.count(None)
        ranked = [
            {None if r is None else r[0] for k in fleet for r in [policy.rank(geom, k, q, weights)]} for q in set(seq)
        ]
        ties += sum(len(r) < len(fleet) for r in ranked)
    # The cases exercise what the fast path relies on: profiles that stop fitting, and equal ranks.
    assert full > 200 and ties > 30 and checked > 1000
