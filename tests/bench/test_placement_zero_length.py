"""A pod that ends when it starts (the Alibaba trace has one) gives its slot back in both replays of
bench/placement.py (``run_online``, the peers) and bench/placement_departures.py (``replay_held``, ours-hold),
so that the two compare the same workload."""

from __future__ import annotations

from allocations.mig.catalog import load_catalog
from bench.placement import Pod, run_online
from bench.placement_departures import replay_held

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
HOUR = 3600


def test_a_pod_of_zero_length_does_not_keep_its_whole_gpu() -> None:
    # given one H100, a whole GPU that ends when it starts, then a whole GPU 10 s later
    pods = [Pod("7g", 0, 0), Pod("7g", 10, 10 + HOUR)]
    started: dict[int, int] = {}
    # when the peers' replay runs them
    r = run_online(H100, 1, pods, "first-fit", 0, started=started)
    # then the second finds the GPU free: both are admitted, as by the replay with a queue
    assert (r.admitted, started) == (2, {0: 0, 1: 10})
    assert replay_held(H100, 1, pods, "first-fit").admitted == 2


def test_both_replays_free_it_before_the_next_arrival_at_the_same_time() -> None:
    # given one H100 and three whole GPUs that arrive together, the first of zero length, the third refused
    pods = [Pod("7g", 0, 0), Pod("7g", 0, HOUR), Pod("7g", 0, 2 * HOUR)]
    online: dict[int, int] = {}
    held: dict[int, int] = {}
    # when both replays run them (with the defrag pass of run_online on its sampled refusals)
    r = run_online(H100, 1, pods, "first-fit", 10, started=online)
    served = replay_held(H100, 1, pods, "first-fit", started=held)
    # then both admit the same two pods and serve the same slice-hours
    assert online == held == {0: 0, 1: 0}
    assert (r.admitted, r.slice_hours) == (served.admitted, served.slice_hours) == (2, 7.0)
