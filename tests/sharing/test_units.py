"""Quota units of shares (allocations/sharing/units.py, allocations/costs.py): GiB, percent of a GPU and
GPU-equivalents, as the common contract of issue 13 defines them."""

from __future__ import annotations

import pytest

from allocations.costs import gpu_equivalents, gpu_model_for, share_request_cost
from allocations.sharing.catalog import UnknownSharedModel, model_names, shared_model
from allocations.sharing.isolation import allowed_by_policy, weaker_warning
from allocations.sharing.units import size_label


def test_a_time_sliced_share_costs_its_gib_and_its_memory_fraction_of_the_gpu() -> None:
    cost = share_request_cost(gpu_model="NVIDIA L4", mps=False, memory_mib=4096, thread_percentage=None, count=3)
    # 4 GiB each; ceil(100 * 4096 / 23034) = 18 % each; 3 * 4096 / 23034 GPUs
    assert (cost.memory_slices, cost.compute_slices) == (12, 54)
    assert cost.gpu_equivalents == pytest.approx(3 * 4096 / 23034)


def test_an_mps_share_costs_its_thread_percentage_and_a_partial_gib_rounds_up() -> None:
    cost = share_request_cost(gpu_model="NVIDIA T4", mps=True, memory_mib=1500, thread_percentage=25, count=2)
    assert (cost.memory_slices, cost.compute_slices) == (4, 50)


def test_a_whole_gpu_share_is_one_gpu_equivalent_in_quota_rows_too() -> None:
    model = gpu_model_for("NVIDIA L4")
    cost = share_request_cost(gpu_model="NVIDIA L4", mps=False, memory_mib=23034, thread_percentage=None, count=1)
    assert model.profile_names() == ()
    assert gpu_equivalents(model, cost.compute_slices, cost.memory_slices) == pytest.approx(1.0)
    assert cost.gpu_equivalents == pytest.approx(1.0)


def test_the_catalog_knows_the_common_non_mig_gpus_and_names_them_on_a_miss() -> None:
    assert {"NVIDIA L4", "NVIDIA L40S", "NVIDIA A10", "NVIDIA T4"} <= set(model_names())
    assert shared_model("NVIDIA L40S").memory_mib > shared_model("NVIDIA L4").memory_mib
    with pytest.raises(UnknownSharedModel, match="Known models: NVIDIA L4"):
        shared_model("NVIDIA H100 80GB HBM3")


def test_isolation_policy_orders_mig_over_mps_over_time_slicing() -> None:
    assert allowed_by_policy(weakest="mps", kind="mig")
    assert allowed_by_policy(weakest="mps", kind="mps")
    assert not allowed_by_policy(weakest="mps", kind="shared")
    assert not allowed_by_policy(weakest="mig", kind="mps")
    assert weaker_warning("mig") == ""
    assert "a crash or a memory hog hurts every tenant" in weaker_warning("shared")
    assert "one fault domain" in weaker_warning("mps")


def test_sizes_read_as_people_say_them() -> None:
    assert size_label(profile="1g.10gb", memory_mib=None) == "1g.10gb"
    assert size_label(profile="share", memory_mib=4096) == "4 GiB share"
    assert size_label(profile="share", memory_mib=1500, thread_percentage=25) == "1500 MiB, 25 % MPS share"
