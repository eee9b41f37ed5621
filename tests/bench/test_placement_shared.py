"""The shared-pool placement benchmark's pure parts: trace parsing, the request mapping, the fill loop and
each policy's invariant (never over-commit a GPU's memory or compute)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.placement_shared import REFERENCE, fill_experiment, run_fill, workload_mix
from bench.shared_online import run_online, size_pool, synthetic_online
from bench.shared_policies import (
    POLICIES,
    FgdLike,
    Gpu,
    OverCommit,
    best_fit,
    commit,
    first_fit,
    fits,
    ours,
    worst_fit,
)
from bench.shared_report import verdict
from bench.shared_workload import ShareRequest, Task, read_trace, sample_until, synthetic_tasks, to_request

L4 = 23034  # MiB
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"


def write_csv(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_it_reads_gpu_tasks_and_counts_the_cpu_only_pods_it_leaves_out(tmp_path: Path) -> None:
    # given a tiny trace in the trace's format: CPU-only, whole, shared, multi-GPU pods
    path = write_csv(
        tmp_path,
        [
            "p0,4000,8192,0,0,,BE,Running,0,10,0",
            "p1,12000,16384,1,1000,,LS,Running,0,10,0",
            "p2,6000,12288,1,470,,LS,Running,5,10,5",
            "p3,32000,65536,4,1000,,LS,Running,7,10,7",
            "p4,6000,12288,1,810,,LS,Pending,8,10,",
        ],
    )
    # when
    tasks, skipped = read_trace(path)
    # then the pod's host memory_mib is not read as GPU memory: no task carries a memory share
    assert tasks == [Task(1000), Task(470), Task(1000, gpus=4), Task(810)]
    assert [(t.created, t.deleted) for t in tasks] == [(0, 10), (5, 10), (7, 10), (8, 10)]
    assert dict(skipped) == {"cpu-only": 1}


def test_it_reads_the_five_column_multigpu_files(tmp_path: Path) -> None:
    # given the short header of the trace's multigpu files (no qos, phase or times)
    path = write_csv(
        tmp_path, ["p0,8000,16384,8,1000", "p1,4000,8192,1,230"], header="name,cpu_milli,memory_mib,num_gpu,gpu_milli"
    )
    # when / then
    assert read_trace(path)[0] == [Task(1000, gpus=8), Task(230)]


def test_a_share_gets_its_gpu_share_of_memory_rounded_up() -> None:
    # given a 470-milli task on an L4 (23,034 MiB): 0.47 x 23,034 = 10,825.98 MiB
    task = Task(470)
    # then exact MiB rounds down to 10,825 (shares adding up to a whole GPU fit its memory); whole GiB up to 11
    assert to_request(task, L4) == ShareRequest(470, 10825)
    assert to_request(Task(600), L4).memory_mib + to_request(Task(400), L4).memory_mib <= L4
    assert to_request(task, L4, 1024) == ShareRequest(470, 11264)
    # and a whole-GPU task takes all the GPU's memory; a memory share of its own overrides the compute share
    assert to_request(Task(1000, gpus=2), L4) == ShareRequest(1000, L4)
    assert to_request(Task(250, memory_share=0.5), L4) == ShareRequest(250, 11517)
    # and rounding never asks for more than the GPU has
    assert to_request(Task(990), L4, 1024) == ShareRequest(990, L4)


def test_sampling_stops_at_the_first_task_that_reaches_the_load() -> None:
    # given tasks of 600 milli and 2 whole GPUs at 130 %: 2,600 milli
    tasks = sample_until([Task(600)], None, 2000, 1.3, seed=3)
    # then five tasks (3,000 milli) and not four (2,400)
    assert len(tasks) == 5
    # and the same seed gives the same order
    mixed = [Task(100), Task(500), Task(1000, gpus=2)]
    assert sample_until(mixed, None, 8000, 1.3, seed=7) == sample_until(mixed, None, 8000, 1.3, seed=7)


def test_the_fill_loop_places_in_order_and_drops_what_does_not_fit() -> None:
    # given 2 L4s and a whole GPU, two 600-milli shares, a 400-milli share
    tasks = [Task(1000), Task(600), Task(600), Task(400)]
    # when first-fit fills them
    result = run_fill(tasks, first_fit, 2, L4)
    # then the whole GPU and one 600 share and the 400 share fit; the second 600 is dropped
    assert (result.whole_placed, result.shares_placed, result.shares_offered) == (1, 2, 3)
    assert result.placed_milli == 2000
    assert result.of_capacity == 1.0
    assert result.of_requested == 2000 / 2600
    # and 1,600 of the 2,000 milli were allocated when the first task was dropped
    assert result.first_reject == 0.8


def test_a_multi_gpu_task_is_placed_all_or_nothing() -> None:
    # given 3 L4s, one already holding a share
    tasks = [Task(300), Task(1000, gpus=3), Task(1000, gpus=2)]
    # when
    result = run_fill(tasks, ours, 3, L4)
    # then the 3-GPU task is refused without keeping any GPU, and the 2-GPU task gets the two untouched ones
    assert (result.whole_offered, result.whole_placed) == (2, 1)
    assert result.placed_milli == 2300


def test_ours_prefers_a_gpu_already_shared_and_keeps_untouched_gpus_for_whole_requests() -> None:
    # given an untouched GPU first, then a shared one with room, then a fuller one with room
    gpus = [Gpu(L4), Gpu(L4, 10000, 400, 1), Gpu(L4, 16000, 600, 2)]
    # then a small share goes to the tightest memory fit among the shared ones
    assert ours(gpus, ShareRequest(100, 2000)) == 2
    # and a share that only the roomier shared GPU can hold goes there, not to the untouched one
    assert ours(gpus, ShareRequest(300, 10000)) == 1
    # and a whole request takes the untouched GPU; with none untouched it is refused
    assert ours(gpus, ShareRequest(1000, L4)) == 0
    assert ours(gpus[1:], ShareRequest(1000, L4)) is None
    # and first-fit would have opened the untouched GPU
    assert first_fit(gpus, ShareRequest(100, 2000)) == 0


def test_fgd_like_avoids_leaving_a_hole_the_workload_cannot_use() -> None:
    # given a workload of 500-milli shares only, a GPU with 700 free and one with 500 free
    mix = {ShareRequest(500, 11517): 1.0}
    gpus = [Gpu(L4, 6910, 300, 1), Gpu(L4, 11517, 500, 1)]
    request = ShareRequest(200, 4607)
    # then best-fit fills the tighter GPU (leaving 300, useless to the workload) and fgd-like the other
    assert best_fit(gpus, request) == 1
    assert FgdLike(mix)(gpus, request) == 0


def test_commit_refuses_an_over_commit() -> None:
    # given a GPU with 20,000 MiB used
    gpu = Gpu(L4, 20000, 300, 1)
    # then a share needing 1 MiB more than is left is refused, and nothing changed
    with pytest.raises(OverCommit):
        commit(gpu, ShareRequest(100, 3035))
    assert gpu == Gpu(L4, 20000, 300, 1)
    # and one needing exactly what is left (memory and compute) fits and fills the GPU
    commit(gpu, ShareRequest(700, 3034))
    assert gpu == Gpu(L4, L4, 1000, 2)
    # and so is a share needing more compute than is left, and a whole request on a shared GPU
    with pytest.raises(OverCommit):
        commit(Gpu(L4, 100, 900, 1), ShareRequest(101, 100))
    assert not fits(Gpu(L4, 1, 1, 1), ShareRequest(1000, L4))


def holds(gpu: Gpu, request: ShareRequest) -> bool:
    """The invariant, written apart from the code under test: memory and compute within the GPU's, and a
    whole-GPU request only on a GPU nobody shares."""
    if request.whole and gpu.shares:
        return False
    return gpu.used_memory_mib + request.memory_mib <= gpu.memory_mib and gpu.used_milli + request.milli <= 1000


request_st = st.one_of(
    st.just(ShareRequest(1000, L4)),
    st.builds(ShareRequest, st.integers(1, 999), st.integers(1, L4)),
)


@settings(max_examples=150, deadline=None)
@given(
    gpus=st.lists(
        st.tuples(st.integers(0, L4), st.integers(0, 1000), st.integers(0, 3)).map(
            lambda t: Gpu(L4, t[0] if t[2] else 0, t[1] if t[2] else 0, t[2])
        ),
        min_size=1,
        max_size=12,
    ),
    request=request_st,
)
def test_every_policy_returns_only_a_gpu_that_fits_and_refuses_only_when_none_does(
    gpus: list[Gpu], request: ShareRequest
) -> None:
    mix = {request: 1.0, ShareRequest(500, L4 // 2): 2.0}
    for name, make in POLICIES.items():
        # when
        index = make(mix)(gpus, request)
        # then
        if index is None:
            assert not any(holds(g, request) for g in gpus), name
        else:
            assert holds(gpus[index], request), name


@settings(max_examples=40, deadline=None)
@given(
    tasks=st.lists(
        st.one_of(
            st.builds(Task, st.integers(1, 999), st.just(1), st.one_of(st.none(), st.floats(0.01, 1.0))),
            st.builds(Task, st.just(1000), st.integers(1, 4)),
        ),
        min_size=1,
        max_size=60,
    ),
    gpus=st.integers(1, 6),
    granularity=st.sampled_from([1, 1024]),
)
def test_a_fill_never_over_commits_memory_or_compute(tasks: list[Task], gpus: int, granularity: int) -> None:
    mix = workload_mix(tasks, L4, granularity)
    for name, make in POLICIES.items():
        # when (commit raises OverCommit on any over-commit)
        result = run_fill(tasks, make(mix), gpus, L4, granularity)
        # then
        assert result.placed_milli <= result.capacity_milli, name
        assert result.placed_memory_mib <= result.capacity_memory_mib, name


def test_the_experiment_runs_every_policy_and_the_reference_on_the_same_samples() -> None:
    # given a small workload
    tasks = [Task(250), Task(500), Task(1000), Task(1000, gpus=2)]
    # when
    rows = fill_experiment("w", tasks, None, 8, L4, 1, seeds=2)
    # then one row per policy plus the offline reference, each with the same 2 samples (same offered GPU)
    assert [r.policy for r in rows] == [*POLICIES, REFERENCE]
    offered = [[run.offered_milli for run in r.runs] for r in rows]
    assert offered == [offered[0]] * len(rows)
    assert len(offered[0]) == 2


def test_worst_fit_spreads_onto_the_emptiest_gpu() -> None:
    # given an untouched GPU and a lightly shared one
    gpus = [Gpu(L4, 100, 100, 1), Gpu(L4)]
    # then worst-fit opens the untouched one, best-fit and ours share
    assert worst_fit(gpus, ShareRequest(100, 100)) == 1
    assert best_fit(gpus, ShareRequest(100, 100)) == 0
    assert ours(gpus, ShareRequest(100, 100)) == 0


def test_the_online_replay_reuses_a_gpu_freed_at_the_same_second() -> None:
    # given one L4: a whole task 0-10 s, a share arriving at 10 s, a whole task at 11 s while the share runs
    tasks = [Task(1000, created=0, deleted=10), Task(500, created=10, deleted=20), Task(1000, created=11, deleted=30)]
    # when
    result = run_online(tasks, ours, 1, L4)
    # then the share gets the GPU freed at 10 s, and the second whole task is dropped
    assert (result.whole_offered, result.whole_placed, result.shares_offered, result.shares_placed) == (2, 1, 1, 1)
    # and GPU-hours: 10 s whole + 10 s half served, 19 s whole more offered
    assert result.served_gpu_hours == pytest.approx((10 + 5) / 3600)
    assert result.offered_gpu_hours == pytest.approx((10 + 5 + 19) / 3600)


def test_the_online_pool_is_sized_for_130_percent_of_the_peak() -> None:
    # given a peak of 13 whole GPUs at once (ten 1-GPU tasks and a 3-GPU task overlapping), then one more later
    tasks = [Task(1000, created=0, deleted=5) for _ in range(10)]
    tasks += [Task(1000, gpus=3, created=1, deleted=6), Task(1000, created=6, deleted=9)]
    # then the pool has 13 / 1.3 = 10 GPUs
    assert size_pool(tasks) == 10


def test_the_synthetic_online_workload_is_seeded() -> None:
    tasks, weights = synthetic_tasks()
    # when
    first = synthetic_online(tasks, weights, 8, 50, seed=1)
    # then
    assert len(first) == 50
    assert [(t.created, t.deleted) for t in first] == [
        (t.created, t.deleted) for t in synthetic_online(tasks, weights, 8, 50, seed=1)
    ]
    assert all(t.deleted >= t.created for t in first)


def test_the_fgd_verdict_asks_for_half_a_point_on_average_and_no_half_point_loss() -> None:
    # then a clear gain everywhere adopts it
    assert "Verdict: adopt it" in verdict({"a": 1.0, "b": 0.6}, {"c": 0.2})[2]
    # and a gain on average with a loss of 0.6 somewhere keeps ours, as does a gain under half a point
    assert "Verdict: keep ours" in verdict({"a": 2.0, "b": 1.0}, {"c": -0.6})[2]
    assert "Verdict: keep ours" in verdict({"a": 0.4, "b": 0.4}, {"c": 0.4})[2]
    # and each figure is named
    assert "a +0.40; b +0.40; c +0.40 (mean +0.40)" in verdict({"a": 0.4, "b": 0.4}, {"c": 0.4})[2]
