"""bench/provision.py: the burst's printouts that explain its whole-GPU count (per-GPU layouts, what was in flight)."""

from __future__ import annotations

from allocations.mig.fleet import Instance
from bench.provision import in_flight_summary, layout_counts


def test_layouts_are_counted_per_gpu_by_profile_and_start_whatever_order_the_instances_were_recorded_in() -> None:
    # given two GPUs holding the same 4g + 3g layout, recorded in opposite orders, a lone 7g, and an empty GPU
    layout = {
        ("n0", 0): [Instance("4g.40gb", 0, owner="a"), Instance("3g.40gb", 4, owner="b")],
        ("n0", 1): [Instance("3g.40gb", 4, owner="c"), Instance("4g.40gb", 0, owner="d")],
        ("n1", 0): [Instance("7g.80gb", 0, owner="e")],
        ("n1", 1): [],
    }
    # then the two 4g + 3g GPUs count as one layout, and the empty GPU is no layout
    assert layout_counts(layout) == {"4g.40gb@0 3g.40gb@4": 2, "7g.80gb@0": 1}


def test_in_flight_summary_gives_means_peaks_and_fifths() -> None:
    # given five pairs of samples: approved-not-planned falls 10 -> 2, claims not allocated rise 0 -> 8 on 0 -> 4 GPUs
    samples = [(0.5 * i, 10 - 2 * (i // 2), 2 * (i // 2), i // 2) for i in range(10)]
    # then the means are over all samples, the peaks per column, and each fifth is two samples
    assert in_flight_summary(samples) == (
        "in flight (approved not planned / claims not allocated / GPUs they pin; 10 samples, 0.5 s apart): "
        "mean 6/4/2, peak 10/8/4; by fifth of the burst: 10/0/0, 8/2/1, 6/4/2, 4/6/3, 2/8/4"
    )
    assert in_flight_summary([]) == "in flight: no sample"
