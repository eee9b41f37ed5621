"""The model of kube-scheduler's slot choice (allocations/mig/scheduler.py) against the driver's counters.

The reference here is not our layout code: it walks the devices NVIDIA's driver publishes for a GPU
(allocations/cluster/fake_fleet.py, in the driver's order) and takes the first one of the profile whose counters are
all still free, which is what the DRA allocator does with a claim pinned to a profile and a GPU.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from allocations.cluster import kube
from allocations.cluster.fake_fleet import resource_slices
from allocations.cluster.published import DriverPools, gpu_model_of, summarize
from allocations.mig import scheduler
from allocations.mig.catalog import GpuModel, MigProfile, Placement
from allocations.mig.engine import choose_placement
from allocations.mig.fleet import Fleet, Gpu, Instance, Node, PlacementRequest
from allocations.mig.layout import EMPTY, geometry

from .brute import MODELS, model

H100 = "NVIDIA H100 80GB HBM3"


class CounterGpu:
    """One GPU as the scheduler sees it: the driver's devices in order, and its shared counters."""

    def __init__(self, model_name: str | GpuModel) -> None:
        gpu_model = model(model_name) if isinstance(model_name, str) else model_name
        spec_slices = resource_slices(gpu_model, "n1", "uid-1", gpu_count=1)
        counter_set = spec_slices[0]["spec"]["sharedCounters"][0]
        self.free = {k: parse_quantity(v["value"]) for k, v in counter_set["counters"].items()}
        self.devices: list[dict[str, Any]] = spec_slices[1]["spec"]["devices"]

    def allocate(self, profile: str) -> int | None:
        """Start of the first device of `profile` whose counters fit (consumed), or None."""
        for device in self.devices:
            if device["attributes"].get("profile", {}).get("string") != profile:
                continue
            wants = {k: parse_quantity(v["value"]) for k, v in device["consumesCounters"][0]["counters"].items()}
            if all(self.free[k] >= n for k, n in wants.items()):
                for k, n in wants.items():
                    self.free[k] -= n
                return int(device["name"].rsplit("-", 1)[1])
        return None


def profiles_of(model_name: str) -> list[str]:
    return [p.name for p in model(model_name).profiles]


@functools.cache
def published_model(model_name: str | GpuModel) -> GpuModel:
    """The model fleet discovery builds from what the (fake) driver publishes for one GPU of `model_name`."""
    base = model(model_name) if isinstance(model_name, str) else model_name
    pools = DriverPools()
    for i, body in enumerate(resource_slices(base, "n1", "uid-1", gpu_count=1)):
        body["metadata"]["name"] = f"s{i}"
        pools.put(summarize(kube.slice_info(body)))
    view = pools.published("n1")
    assert view is not None and view.gpus[0].figures is not None
    built = gpu_model_of(view.gpus[0].figures, base)
    assert built is not None
    return built


@pytest.mark.parametrize("model_name", MODELS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_first_fit_is_the_first_device_whose_counters_fit(model_name: str, data: st.DataObject) -> None:
    # given: a GPU as the driver publishes it, and a sequence of single-slice claims; the prediction uses the
    # figures the node publishes (issue 10: the cluster wins; the catalog lacks some, e.g. A100 1g.10gb)
    geom = geometry(published_model(model_name))
    sequence = data.draw(st.lists(st.sampled_from(profiles_of(model_name)), max_size=8))
    cluster = CounterGpu(model_name)
    key = EMPTY
    for profile in sequence:
        # when: the scheduler allocates the next claim, and we predict it
        predicted = scheduler.first_fit(geom, key, [geom.index[profile]])
        allocated = cluster.allocate(profile)
        # then: the scheduler takes exactly the device we predict, and refuses exactly what we say does not
        # fit (the published figures and our MIG rules agree on every model here)
        if predicted is None:
            assert allocated is None, (sequence, profile)
            continue
        key, [start] = predicted
        assert allocated == start, (sequence, profile)


def test_first_fit_takes_the_lowest_free_legal_start_for_each_slice_of_a_claim() -> None:
    geom = geometry(model(H100))
    i1, i2 = geom.index["1g.10gb"], geom.index["2g.20gb"]
    placed = scheduler.first_fit(geom, EMPTY, [i1, i2, i1])
    assert placed is not None
    assert placed[1] == [0, 2, 1]


def test_claims_whose_order_decides_whether_they_fit_are_not_order_safe() -> None:
    # given an empty H100: 4g.40gb only starts at 0, 3g.40gb at 0 or 4
    geom = geometry(model(H100))
    g4, g3, g1, g2 = (geom.index[p] for p in ("4g.40gb", "3g.40gb", "1g.10gb", "2g.20gb"))
    # then: 3g first leaves no room for the 4g, so the pair is unsafe; 1g and 2g fit in any order
    assert not scheduler.order_safe(geom, EMPTY, [[g4], [g3]])
    assert scheduler.order_safe(geom, EMPTY, [[g1], [g2]])
    assert scheduler.order_safe(geom, EMPTY, [[g3], [g3]])
    assert not scheduler.order_safe(geom, EMPTY, [[g4], [g1]])


def test_a_gpu_admits_at_most_max_in_flight_waiting_claims() -> None:
    geom = geometry(model(H100))
    g1 = geom.index["1g.10gb"]
    waiting = [[g1]] * scheduler.MAX_IN_FLIGHT_PER_GPU
    assert scheduler.admits(geom, EMPTY, waiting[:-1], [g1])
    assert not scheduler.admits(geom, EMPTY, waiting, [g1])


def test_predict_gives_each_waiting_claim_its_slot_in_order_and_none_when_it_lost_its_room() -> None:
    geom = geometry(model(H100))
    g1, g2, g4 = geom.index["1g.10gb"], geom.index["2g.20gb"], geom.index["4g.40gb"]
    # the scheduler put a 2g at 0 (not predicted): the waiting 1g now goes to 2, the waiting 4g nowhere
    base = geom.named_key((("2g.20gb", 0, False),))
    assert scheduler.predict(geom, base, [[g1], [g4], [g2]]) == [[2], None, [4]]


def test_ours_first_slot_chooses_the_gpu_and_leaves_the_slot_to_first_fit() -> None:
    # given GPU 0 with a 4g at slot 0 and an empty GPU 1
    m = model(H100)
    fleet = Fleet([Node("n1", [Gpu("n1", 0, m, [Instance("4g.40gb", 0, "a")]), Gpu("n1", 1, m, [])])])
    # when: a 3g.40gb, then a 1g.10gb is placed
    # then: the GPU already in use, each at its first free legal start (where the scheduler puts it)
    decision = choose_placement(fleet, PlacementRequest("3g.40gb"), "ours-first-slot")
    assert decision is not None and (decision.gpu_index, decision.start) == (0, 4)
    decision = choose_placement(fleet, PlacementRequest("1g.10gb"), "ours-first-slot")
    assert decision is not None and (decision.gpu_index, decision.start) == (0, 4)


def sixteen_slot_gpu() -> GpuModel:
    """A made-up GPU with a profile of 16 placements: no catalog model has a placement start of 10 or more yet
    (the RTX PRO 6000's last is 9), but NVML may report one, and then the driver's name order is not slot order.
    The catalog has no NVIDIA figures for it, so the tests read them from what the fake driver publishes."""
    return GpuModel(
        name="Synthetic 16-slot GPU",
        aliases=(),
        compute_slices=16,
        memory_slices=16,
        memory_mib=16384,
        profiles=(
            MigProfile("1g.1gb", 19, 1, 1, 1024, 16, tuple(Placement(s, 1) for s in range(16))),
            MigProfile("16g.16gb", 0, 16, 16, 16384, 1, (Placement(0, 16),)),
        ),
    )


BYTE_ORDER = [0, 1, 10, 11, 12, 13, 14, 15, 2, 3, 4, 5, 6, 7, 8, 9]


def test_the_driver_order_of_placements_is_the_byte_order_of_their_device_names() -> None:
    # given: the devices the driver publishes for the 16-slot GPU (names sorted as Go sorts strings)
    devices = CounterGpu(sixteen_slot_gpu()).devices
    # then: a profile's placements come as "...-19-1" < "...-19-10" < "...-19-2", and so does our key
    starts = [int(d["name"].rsplit("-", 1)[1]) for d in devices if d["attributes"]["profile"]["string"] == "1g.1gb"]
    assert starts == BYTE_ORDER
    assert sorted(range(16), key=scheduler.driver_order) == BYTE_ORDER


def test_first_fit_follows_the_drivers_byte_order_where_it_differs_from_slot_order() -> None:
    # given: the 16-slot GPU, empty, as our model and as the scheduler sees it
    m = published_model(sixteen_slot_gpu())
    geom = geometry(m)
    cluster = CounterGpu(sixteen_slot_gpu())
    key = EMPTY
    predicted, allocated = [], []
    # when: 1g.1gb claims are allocated one after another until it is full
    for _ in range(17):
        placed = scheduler.first_fit(geom, key, [geom.index["1g.1gb"]])
        allocated.append(cluster.allocate("1g.1gb"))
        if placed is None:
            predicted.append(None)
            continue
        key, [start] = placed
        predicted.append(start)
    # then: after 0 and 1 the third goes to 10, not 2: the prediction is the scheduler's walk, not slot order
    assert predicted == [*BYTE_ORDER, None]
    assert allocated == predicted


def test_ours_first_slot_plans_the_slot_the_driver_order_gives() -> None:
    # given: the 16-slot GPU (as its node publishes it) with 1g.1gb slices at 0 and 1
    m = published_model(sixteen_slot_gpu())
    fleet = Fleet([Node("n1", [Gpu("n1", 0, m, [Instance("1g.1gb", 0, "a"), Instance("1g.1gb", 1, "a")])])])
    # when
    decision = choose_placement(fleet, PlacementRequest("1g.1gb"), "ours-first-slot")
    # then: slot 10, where the scheduler will put it ("...-19-10" comes before "...-19-2")
    assert decision is not None and (decision.gpu_index, decision.start) == (0, 10)


# --- where the figures come from (issue 10) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_name", "without_figures"),
    [
        ("NVIDIA A100-SXM4-40GB", ["1g.10gb"]),
        # the whole GPU's figures are unknown, so no profile's counters can be checked
        ("NVIDIA B200", ["1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"]),
        ("NVIDIA H100 80GB HBM3", []),
    ],
)
def test_with_no_published_and_no_nvidia_figures_a_profile_is_not_placed(
    model_name: str, without_figures: list[str]
) -> None:
    # given: the catalog's model alone (no node has published anything)
    geom = geometry(model(model_name))
    # then: the profiles the catalog has no NVIDIA figures for are never predicted, the others are
    refused = [p.name for p in geom.profiles if scheduler.first_fit(geom, EMPTY, [geom.index[p.name]]) is None]
    assert refused == without_figures
    # and: once a node publishes its figures, every profile is placed there
    published = geometry(published_model(model_name))
    assert [p.name for p in published.profiles if scheduler.fits(published, EMPTY, published.index[p.name]) == 0] == []


def test_the_fourth_a100_1g10gb_fits_by_the_published_counters() -> None:
    # given: an A100-40GB as its driver publishes it (the invented engine figures refused the 4th 1g.10gb)
    geom = geometry(published_model("NVIDIA A100-SXM4-40GB"))
    # then: as many 1g.10gb as the MIG guide allows
    assert scheduler.fits(geom, EMPTY, geom.index["1g.10gb"]) == geom.model.profile("1g.10gb").max_count
