"""The compaction bound of issue 14 (bench/compaction_oracle.py): exact "fits after a repack", refusals by cause,
and the oracles on a replay small enough to check by hand."""

from __future__ import annotations

from collections import Counter

from allocations.mig.catalog import load_catalog
from bench.compaction_oracle import Packer, first_fit_losses, oracle_replay
from bench.placement import Pod

H100 = load_catalog().model("NVIDIA H100 80GB HBM3")
# Two H100s: a 1g.10gb goes first (GPU 0, slot 0), a 4g.40gb takes GPU 1, and a second 4g.40gb (slot 0 only) is
# refused though moving the 1g.10gb beside the first 4g.40gb makes room for it.
FRAGMENTED = [Pod("1g", 0, 3600), Pod("4g", 1, 3601), Pod("4g", 2, 3602)]


def test_fits_is_the_mig_rules_not_the_sum_of_slices() -> None:
    packer = Packer(H100, 2)
    assert packer.fits(Counter({"7g.80gb": 2})) is True
    assert packer.fits(Counter({"4g.40gb": 2, "3g.40gb": 2})) is True
    # within the two GPUs' compute and memory slices, but one 4g.40gb per GPU at most
    assert packer.within_capacity(Counter({"4g.40gb": 3}))
    assert packer.fits(Counter({"4g.40gb": 3})) is False
    assert packer.fits(Counter({"7g.80gb": 2, "1g.10gb": 1})) is False


def test_a_refusal_a_repack_would_admit_is_counted_as_such() -> None:
    losses = first_fit_losses(H100, 2, FRAGMENTED)
    assert losses.refused == Counter({"repack": 1})
    assert losses.slice_hours["repack"] == 4.0  # four compute slices for an hour
    # a third 4g.40gb on two GPUs: no layout holds it, whatever moves
    assert first_fit_losses(H100, 2, [Pod("4g", 0, 10), Pod("4g", 0, 10), Pod("4g", 1, 10)]).refused == Counter(
        {"layout": 1}
    )


def test_the_oracles_admit_what_a_repack_fits_within_their_move_budget() -> None:
    unlimited = oracle_replay(H100, 2, FRAGMENTED)
    assert (unlimited.admitted, unlimited.moves) == (3, None)
    # one move, allowed when the budget is every admitted allocation
    bounded = oracle_replay(H100, 2, FRAGMENTED, moves=2, budget=1.0)
    assert (bounded.admitted, bounded.moves, bounded.rescues) == (3, 1, 1)
    # 2 % of two allocations admitted is no move at all
    assert oracle_replay(H100, 2, FRAGMENTED, moves=2, budget=0.02).admitted == 2
