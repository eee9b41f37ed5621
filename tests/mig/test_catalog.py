"""The MIG catalog: the copied reference table, lookups, flags and NVML overrides."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from allocations.mig.catalog import (
    Catalog,
    NvmlGpuReport,
    NvmlProfileReport,
    Placement,
    UnknownGpuModel,
    UnknownProfile,
    gpu_equivalents,
    load_catalog,
    smallest_profile_covering,
)


def test_the_copied_table_says_where_it_comes_from_and_keeps_its_sources() -> None:
    # given the JSON shipped with the package
    raw = json.loads(resources.files("allocations.mig").joinpath("data/mig_profiles.json").read_text("utf-8"))
    # then it names its origin and keeps the reference's source list
    assert "shared reference" in raw["copied_from"]
    assert [s["id"] for s in raw["sources"]][:3] == ["S1", "S2", "S3"]


def test_it_loads_the_catalog_once_per_process() -> None:
    # when the catalog is loaded twice
    # then it is the same object (functools.cache)
    assert load_catalog() is load_catalog()


def test_it_lists_the_h100_profiles_with_their_slices_and_placements() -> None:
    # given the H100 80GB model
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    # when reading its 3g profile
    p = h100.profile("3g.40gb")
    # then the values are those of the reference table
    assert (h100.compute_slices, h100.memory_slices, h100.memory_mib) == (7, 8, 81559)
    assert h100.profile_names() == ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
    assert (p.profile_id, p.compute_slices, p.memory_slices, p.memory_mib, p.max_count) == (9, 3, 4, 40448, 2)
    assert p.placements == (Placement(0, 4), Placement(4, 4))
    assert not p.unconfirmed


def test_it_finds_a_model_by_an_alias_whatever_the_case() -> None:
    # when looking up the name older drivers print, in lower case
    model = load_catalog().model("a100-sxm4-40gb")
    # then it is the canonical model
    assert model.name == "NVIDIA A100-SXM4-40GB"


def test_it_keeps_the_unconfirmed_h200_placements_flagged() -> None:
    # given H200, whose placements the reference copied from H100 (unconfirmed)
    h200 = load_catalog().model("NVIDIA H200")
    # then every profile carries the flag, and the model-level flag stays as the JSON has it
    assert all(p.unconfirmed_fields == ("placements",) for p in h200.profiles)
    assert h200.unconfirmed is False
    assert load_catalog().model("NVIDIA H200 NVL").unconfirmed is True


def test_it_explains_an_unknown_profile_with_the_known_ones() -> None:
    # given the A30 model
    a30 = load_catalog().model("NVIDIA A30")
    # when asking for an H100 profile
    with pytest.raises(UnknownProfile) as e:
        a30.profile("3g.40gb")
    # then the message lists what exists, and it is a KeyError
    assert str(e.value) == (
        "NVIDIA A30 has no MIG profile '3g.40gb'; known profiles: 1g.6gb, 1g.6gb+me, 2g.12gb, 2g.12gb+me, 4g.24gb"
    )
    assert isinstance(e.value, KeyError)


def test_it_rejects_an_unknown_gpu_model_with_a_key_error() -> None:
    # when asking for a model that is not in the catalog
    with pytest.raises(UnknownGpuModel) as e:
        load_catalog().model("NVIDIA T4")
    # then the message starts with the name asked for
    assert str(e.value).startswith("no GPU model 'NVIDIA T4' in the MIG catalog; known models: NVIDIA A30, ")


def test_gpu_equivalents_take_the_larger_of_the_compute_and_memory_shares() -> None:
    # given H100 (7 compute slices, 8 memory slots)
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    # then 1g.20gb weighs its memory share and 3g.40gb its memory share too
    assert gpu_equivalents(h100, 1, 2) == 0.25
    assert gpu_equivalents(h100, 3, 4) == 0.5
    assert gpu_equivalents(h100, 4, 4) == 4 / 7


def test_the_smallest_covering_profile_skips_media_variants_and_needs_enough_memory() -> None:
    # given H100
    h100 = load_catalog().model("NVIDIA H100 80GB HBM3")
    # then a 10 % share with 12 GiB needs the double-memory 1g, and 47 % of compute needs 4g
    assert smallest_profile_covering(h100, 0.10, 12_000).name == "1g.20gb"  # type: ignore[union-attr]
    assert smallest_profile_covering(h100, 0.47).name == "4g.40gb"  # type: ignore[union-attr]
    assert smallest_profile_covering(h100, 1.0, 200_000) is None


def test_nvml_reports_replace_the_catalog_model_and_clear_its_flags() -> None:
    # given an agent report for H200 with one profile at a placement the catalog does not list
    report = NvmlGpuReport(
        "NVIDIA H200",
        143771,
        [
            NvmlProfileReport("1g.18gb", 19, 1, 7, 16384, [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1)]),
            NvmlProfileReport("7g.141gb", 0, 7, 1, 143104, [(0, 8)]),
            NvmlProfileReport("3g.71gb", 9, 3, 2, 71168, [(4, 4), (0, 4)]),
        ],
    )
    # when building a catalog from it on top of the built-in one
    catalog = Catalog.from_nvml([report], base=load_catalog())
    h200 = catalog.model("H200")
    # then the reported model wins, unflagged, keeps the aliases and the engines the report lacks
    assert h200.source == "nvml"
    assert h200.profile_names() == ("1g.18gb", "7g.141gb", "3g.71gb")
    assert h200.profile("3g.71gb").placements == (Placement(0, 4), Placement(4, 4))
    assert not any(p.unconfirmed for p in h200.profiles)
    assert h200.aliases == load_catalog().model("NVIDIA H200").aliases
    assert h200.profile("1g.18gb").engines == load_catalog().model("NVIDIA H200").profile("1g.18gb").engines
    assert (h200.compute_slices, h200.memory_slices) == (7, 8)
    # and the other models are untouched
    assert catalog.model("NVIDIA A30") is load_catalog().model("NVIDIA A30")


def test_it_refuses_a_profile_whose_placements_do_not_fit_the_grid() -> None:
    # given a report where a placement runs past the grid
    report = NvmlGpuReport(
        "NVIDIA X",
        1000,
        [NvmlProfileReport("1g", 1, 1, 2, 500, [(0, 1)]), NvmlProfileReport("2g", 2, 2, 1, 1000, [(1, 2)])],
    )
    # when building the model, then it says what is wrong
    with pytest.raises(ValueError, match="placement 1:2 of 2g does not fit a 2-slot grid"):
        Catalog.from_nvml([report])
