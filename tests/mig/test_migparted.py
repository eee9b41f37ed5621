"""mig-parted configs for MIG-manager mode: the format, deterministic names, merging, and the packing check."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from allocations.mig.layout import is_valid_layout
from allocations.mig.migparted import (
    InvalidManagerConfig,
    InvalidManagerLayout,
    build_config,
    config_entries,
    find_packing,
    layout_problems,
    merged_config,
)

from .brute import MODELS, model, valid_layouts

H100 = "NVIDIA H100 80GB HBM3"
GOLDEN = Path(__file__).parent / "data" / "migparted-golden.yaml"
# What the GPU Operator's default ConfigMap holds before Fatia writes (two of its stock entries).
OPERATOR_CONFIG = """version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"""
LAYOUT = {
    0: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
    1: {"7g.80gb": 1},
    2: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1, "4g.40gb": 0},
    3: {},
}


def test_a_layout_becomes_the_golden_config_next_to_the_operators_entries() -> None:
    # given the operator's config and a four-GPU layout, two GPUs alike
    name, entries = build_config(model(H100), LAYOUT)
    # when Fatia's entry is merged in
    text = merged_config(OPERATOR_CONFIG, name, entries)
    # then the file is the golden one: alike GPUs share an entry, zero counts are dropped, others' entries kept
    assert text == GOLDEN.read_text()
    assert yaml.safe_load(text)["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]


def test_the_name_depends_only_on_the_counts() -> None:
    # given the same layout written in another order, and a layout with one count more
    same = {3: {}, 2: {"3g.40gb": 1, "1g.10gb": 2, "2g.20gb": 1}, 1: {"7g.80gb": 1}, 0: dict(LAYOUT[0])}
    other = {**LAYOUT, 3: {"1g.10gb": 1}}
    # when
    names = [build_config(model(H100), x)[0] for x in (LAYOUT, same, other)]
    # then
    assert names[0] == names[1] == "fatia-727873e789e4"
    assert names[2] != names[0] and names[2].startswith("fatia-")


def test_merging_the_same_entry_again_writes_nothing() -> None:
    # given a config that already holds Fatia's entry
    name, entries = build_config(model(H100), LAYOUT)
    text = merged_config(OPERATOR_CONFIG, name, entries)
    # when the same entry is merged again
    again = merged_config(text, name, entries)
    # then there is nothing to write
    assert again is None


def test_a_second_entry_keeps_the_first() -> None:
    # given the config with one of Fatia's entries
    first, entries = build_config(model(H100), LAYOUT)
    text = merged_config(OPERATOR_CONFIG, first, entries)
    # when another layout's entry is added
    second, more = build_config(model(H100), {0: {"1g.20gb": 4}})
    merged = yaml.safe_load(merged_config(text, second, more) or "")
    # then all four entries are there
    assert sorted(merged["mig-configs"]) == sorted(["all-disabled", "all-1g.10gb", first, second])
    assert merged["mig-configs"][second] == [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.20gb": 4}}]


def test_an_empty_or_missing_config_starts_a_new_one() -> None:
    name, entries = build_config(model(H100), {0: {"7g.80gb": 1}})
    for text in (None, "", "  \n"):
        assert yaml.safe_load(merged_config(text, name, entries) or "") == {
            "version": "v1",
            "mig-configs": {name: [{"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]},
        }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: v1\nmig-configs: [\n", "config.yaml is not valid YAML"),
        ("version: v2\nmig-configs: {}\n", "config.yaml is not a mig-parted config of version v1"),
        ("- a\n- b\n", "config.yaml is not a mig-parted config of version v1"),
        ("version: v1\nmig-configs: [a]\n", "config.yaml: mig-configs is not a mapping of config names"),
    ],
)
def test_a_config_that_is_not_mig_parted_v1_is_refused_rather_than_overwritten(text: str, message: str) -> None:
    name, entries = build_config(model(H100), {0: {"7g.80gb": 1}})
    with pytest.raises(InvalidManagerConfig) as caught:
        merged_config(text, name, entries)
    assert str(caught.value).startswith(message)


def test_a_foreign_entry_under_our_name_is_not_replaced() -> None:
    # given someone wrote something else under the name Fatia would use
    name, entries = build_config(model(H100), {0: {"7g.80gb": 1}})
    text = f"version: v1\nmig-configs:\n  {name}:\n  - devices: all\n    mig-enabled: false\n"
    # when / then
    with pytest.raises(InvalidManagerConfig, match=f"already has a different config named {name}"):
        merged_config(text, name, entries)


def test_counts_that_cannot_be_packed_are_refused_with_every_reason() -> None:
    # given GPUs with too much compute, too much memory, two 1g.10gb+me (at most one), an unknown profile and a
    # negative count; and two good GPUs
    layout = {
        0: {"1g.10gb": 8},
        1: {"3g.40gb": 2, "1g.20gb": 1},
        2: {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 0},
        3: {"1g.10gb+me": 2},
        4: {"5g.50gb": 1, "1g.10gb": -1},
        5: {"1g.10gb": 7},
    }
    # when
    with pytest.raises(InvalidManagerLayout) as caught:
        build_config(model(H100), layout)
    # then each bad GPU is named with its reason, the good ones are not
    assert caught.value.problems == [
        "GPU 0: 8 x 1g.10gb cannot be packed on one NVIDIA H100 80GB HBM3 (8 compute slices; the GPU has 7)",
        "GPU 1: 1 x 1g.20gb + 2 x 3g.40gb cannot be packed on one NVIDIA H100 80GB HBM3 "
        "(10 memory slices; the GPU has 8)",
        "GPU 3: 2 x 1g.10gb+me cannot be packed on one NVIDIA H100 80GB HBM3 (at most 1 x 1g.10gb+me)",
        "GPU 4: the count of 1g.10gb must be a non-negative integer, not -1",
        "GPU 4: '5g.50gb' is not a MIG profile of NVIDIA H100 80GB HBM3 (known: 1g.10gb, 1g.10gb+me, 1g.20gb, "
        "2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)",
    ]


@pytest.mark.parametrize(
    ("gpu", "counts", "why"),
    [
        ("NVIDIA A30", {"1g.6gb+me": 1, "2g.12gb+me": 1}, "at most one instance with media extensions per GPU"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            {"2g.48gb": 1, "2g.48gb+me.all": 1},
            "a +me.all instance allows only -me instances beside it",
        ),
    ],
)
def test_counts_within_compute_and_memory_that_break_the_media_rules_are_refused(
    gpu: str, counts: dict[str, int], why: str
) -> None:
    # given counts that fit the GPU's compute and memory (the only such refusals in the catalog: on every model,
    # counts within compute, memory and max counts and without media profiles can always be packed)
    # when / then
    assert find_packing(model(gpu), counts) is None
    assert layout_problems(model(gpu), {0: counts})[0].endswith(f"({why})")


def test_an_empty_layout_is_refused() -> None:
    assert layout_problems(model(H100), {}) == ["the layout names no GPU"]


def test_a_gpu_with_no_instances_gets_mig_on_and_no_devices() -> None:
    assert config_entries({0: {}, 1: {"1g.10gb": 0}}) == [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {}}]


@pytest.mark.parametrize("name", MODELS)
def test_a_packing_exists_exactly_for_the_counts_of_some_valid_layout(name: str) -> None:
    # given every valid layout's profile counts (brute force from the reference's rules)
    m = model(name)
    possible = {frozenset(Counter(p for p, _ in layout).items()) for layout in valid_layouts(name)}
    # when the packing search is asked for each of them, and for each with one instance more of some profile
    for counts in possible:
        packing = find_packing(m, dict(counts))
        # then it finds a valid layout with exactly those counts
        assert packing is not None and is_valid_layout(m, packing)
        assert Counter(p for p, _ in packing) == Counter(dict(counts))
        for profile in m.profile_names():
            more = Counter(dict(counts))
            more[profile] += 1
            # and it finds one with one more exactly when such a layout exists
            assert (find_packing(m, dict(more)) is not None) == (frozenset(more.items()) in possible)
