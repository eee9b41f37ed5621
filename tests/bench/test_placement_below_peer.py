"""bench/placement_below_peer.py: the noise baseline (peers below one another) and the switchable parts of the rule."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from bench.placement_below_peer import HELD, LATE, NOFIT, PLACED, REFUSED, Knobs, baseline, play
from bench.placement_confirm import KEPT, FillLeft, Recording, serve
from bench.placement_family import Sample, make_sample
from bench.placement_intervals import Record

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")


def record(seed: int, peers: tuple[int, int, int], kept: int, warm: int, optimum: float = 50.0) -> Record:
    first, best, hami = peers
    return Record("H100", 8, 1.0, seed, optimum, True, {"first-fit": first, "best-fit": best, "hami": hami},
                  {KEPT: kept}, {KEPT: warm})  # fmt: skip


def test_a_peer_counts_below_the_best_of_the_other_peers_only_beyond_noise() -> None:
    # given one slice of noise (a 50-slice reference): first-fit 2 under best-fit, hami 1 under it (noise)
    records = [record(0, (40, 42, 41), 42, 40), record(1, (40, 40, 40), 38, 39)]
    # when the baseline reads them
    (row,) = baseline(records)
    # then first-fit is below the others once, best-fit and hami never; the rule cold once (38 < 40 - 1) and warm on
    # both samples (40 < 42 - 1, 39 is within noise of 40: not)
    assert row.peers == {"first-fit": 1, "best-fit": 0, "hami": 0}
    assert row.peers_disagree == 1
    assert row.rules[KEPT] == (1, 1)


def test_the_noise_grows_with_the_reference_on_large_fleets() -> None:
    # given a 1,000-slice reference (noise 5 slices): first-fit 4 under the others is noise, 6 under is not
    records = [record(0, (996, 1000, 1000), 1000, 1000, 1000.0), record(1, (994, 1000, 1000), 1000, 1000, 1000.0)]
    (row,) = baseline(records)
    assert row.peers["first-fit"] == 1


def test_with_every_part_on_the_runs_serve_what_the_confirm_bench_serves() -> None:
    for alpha, seed in ((0.5, 3), (2.0, 2), (2.0, 7)):
        sample = make_sample(H100, 8, alpha, seed)
        for warm in (False, True):
            assert play(sample, Knobs(), warm).served == serve(sample, Recording(), warm)
            assert play(sample, Knobs(refusals=True), warm).served == serve(sample, FillLeft(trusted=True), warm)


def test_the_holds_switched_off_place_every_held_request_and_a_flip_places_one() -> None:
    # given a tuning draw on which the kept rule holds 1g.20gb
    sample = make_sample(H100, 8, 2.0, 2)
    full = play(sample, Knobs())
    held = [e.k for e in full.events if e.outcome == HELD]
    assert held
    # then without holds none is held, and flipping the first hold places that request alone
    assert all(e.outcome != HELD for e in play(sample, Knobs(holds=False)).events)
    flipped = play(sample, Knobs(flip=held[0]))
    assert flipped.events[held[0]].outcome == PLACED
    assert [e.outcome for e in flipped.events[: held[0]]] == [e.outcome for e in full.events[: held[0]]]


def test_fill_left_refuses_a_4g_that_opens_a_gpu_the_7g_to_come_need_and_a_let_places_it() -> None:
    # given a pool that has seen only 7g (warm), four 7g placed on 8 H100, then a 4g, then four more 7g; the holds off
    requests = ("7g.80gb",) * 4 + ("4g.40gb",) + ("7g.80gb",) * 4
    sample = Sample(H100, 8, 1.0, 0, {}, requests, ("7g.80gb",) * 100)
    # then the trusted share refuses the 4g (the fill still brings a 7g per empty GPU) and serves every 7g
    refused = play(sample, Knobs(refusals=True, holds=False), warm=True)
    assert refused.events[4].outcome == REFUSED
    assert refused.served == 8 * 7
    # and with that refusal let through the 4g is placed and the last 7g does not fit
    let = play(sample, Knobs(refusals=True, holds=False, let=4), warm=True)
    assert let.events[4].outcome == PLACED
    assert let.served == 7 * 7 + 4
    # and without refusals nothing is refused
    assert all(e.outcome != REFUSED for e in play(sample, Knobs(holds=False), warm=True).events)


def test_held_requests_are_forced_at_the_first_arrival_that_fits_nowhere() -> None:
    # given a tuning draw on which the kept rule holds small requests early in the fill
    sample = make_sample(H100, 8, 0.5, 110)
    kept = play(sample, Knobs())
    assert any(e.outcome == HELD for e in kept.events)
    # when the candidate forces them at the first arrival that fits nowhere
    retried = play(sample, Knobs(retry="no-fit"))
    first = next(e.k for e in retried.events if e.outcome == NOFIT)
    late = [e for e in retried.events if e.outcome == LATE]
    # then nothing changes before the pool refuses something, held requests are placed after it, and they count
    assert [e.outcome for e in retried.events[:first]] == [
        LATE if e.outcome == HELD and e.k in {x.k for x in late} else e.outcome for e in kept.events[:first]
    ]
    assert late
    assert all(e.k < first for e in late[:1])
    assert retried.served == sum(e.compute for e in retried.events if e.outcome in (PLACED, LATE))
    assert retried.served > kept.served
