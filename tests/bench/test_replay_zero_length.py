"""A pod (or task) that ends when it starts gives its slot back in every online replay of bench/, not only in
bench/placement.py's (tests/bench/test_placement_zero_length.py): sorted with departures before arrivals at equal
times, its departure came before its own arrival, found nothing to release, and it held its slot to the end."""

from __future__ import annotations

from collections import Counter

import pytest

from allocations.mig.catalog import load_catalog
from bench.compaction import replay
from bench.compaction_oracle import first_fit_losses, oracle_replay
from bench.placement import Pod
from bench.placement_static import STRATEGIES, replay_static
from bench.replay_events import ARRIVAL, DEPARTURE, replay_events
from bench.shared_online import run_online
from bench.shared_policies import first_fit
from bench.shared_workload import Task

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
HOUR = 3600
# One H100: a whole GPU that ends when it starts, then a whole GPU 10 s later.
ZERO_THEN_WHOLE = [Pod("7g", 0, 0), Pod("7g", 10, 10 + HOUR)]


def test_its_departure_comes_after_its_own_arrival_and_before_the_next_arrival_at_that_time() -> None:
    # given a pod that ends at 5 when the zero-length pod and a third arrive, and a pod that ends before it starts
    pods = [Pod("1g", 0, 5), Pod("1g", 5, 5), Pod("1g", 5, 9), Pod("1g", 7, 6)]
    # when the replay orders their events
    events = replay_events(pods)
    # then the departure at 5 comes first, the zero-length pod leaves right after it came, before the third comes
    assert events == [
        (0, ARRIVAL, 0),
        (5, DEPARTURE, 0),
        (5, ARRIVAL, 1),
        (5, DEPARTURE, 1),
        (5, ARRIVAL, 2),
        (7, ARRIVAL, 3),
        (7, DEPARTURE, 3),
        (9, DEPARTURE, 2),
    ]


def test_the_compaction_replay_admits_the_pod_after_it() -> None:
    r = replay(H100, 1, ZERO_THEN_WHOLE, "first-fit", rescue=False, beat=False, movable_share=0.0)
    assert r.admitted == 2


def test_the_oracle_replays_admit_the_pod_after_it_and_count_no_refusal() -> None:
    assert oracle_replay(H100, 1, ZERO_THEN_WHOLE).admitted == 2
    assert oracle_replay(H100, 1, ZERO_THEN_WHOLE, moves=8).admitted == 2
    assert first_fit_losses(H100, 1, ZERO_THEN_WHOLE).refused == Counter()


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_the_static_replay_admits_the_pod_after_it(strategy: str) -> None:
    # the static replay of bench/placement_static.py and bench/preshape_fleet.py, with pre-shaping off
    run = replay_static(STRATEGIES[strategy](H100, 1), ZERO_THEN_WHOLE, None)
    assert (run.requests, run.admitted) == (2, 2)


def test_the_shared_pool_replay_admits_the_task_after_it() -> None:
    # given one whole GPU asked for with no length, then another 10 s later, on a pool of one GPU
    tasks = [Task(1000, created=0, deleted=0), Task(1000, created=10, deleted=10 + HOUR)]
    # when the shared pool's online replay runs them
    r = run_online(tasks, first_fit, 1, 23_034)
    # then both are placed
    assert (r.whole_offered, r.whole_placed) == (2, 2)
