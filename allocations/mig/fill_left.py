"""Fill left (issue 14): ``ours-hold``'s admission rule for a request that would open an empty GPU.

While a pool fills (no release seen yet: churn 0, as the hold budget and the rollout veto), the rule refuses a
request that would open an empty GPU while the arrivals of the model's largest profile (the 7g) that the rest of the
fill still brings reach the empty GPUs left: the offline optimum refuses e.g. a 4g whose GPU a 7g would take whole,
and the kept hold rule never sees such a request, since its rank does not flag it (session 13: 111 of the 124
placements that would serve more if refused were not flagged, docs/placement.md).

What the fill still brings is estimated from the pool alone, as the veto's rollouts do (:mod:`.rollout`): ``LOAD`` x
the free compute, at most a fill of ``LOAD`` x the pool's compute less what it allocated and held, less the request
itself; the 7g's share of it from the request counts of now (``raw``), or from the counts blended with the learner's
prior (``trusted``: one early 7g is not a 7g-heavy mix). Chosen on the tuning draws of ``bench/placement_confirm.py``
(its ``FillLeft`` runs this rule through the engine); which variant the policy uses is
:attr:`.policies.HoldingFragmentationAware.FILL_LEFT`.

The engine asks only for a placement it would make that opens an empty GPU (:meth:`.engine.PlacementEngine.choose`),
so the rule costs nothing on the other decisions. A refusal is not counted as held compute (the hold budget's), as
in the session-13 benches whose numbers it reproduces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from .catalog import GpuModel
from .demand import DemandMix
from .layout import Geometry
from .rollout import LOAD

FillLeftRule = Literal["off", "raw", "trusted"]
RULES: tuple[FillLeftRule, ...] = ("off", "raw", "trusted")


@dataclass(frozen=True, slots=True)
class FillContext:
    """What the rule weighs for a request of profile ``i`` (``count`` instances) whose placement would open an empty
    GPU of ``geom``'s model: the request counts now and the prior's pseudo-requests (``prior_weight``), releases
    per request lately (``churn``), and the pool's GPUs of the model: how many (``gpus``), how many of them are empty
    (``empty``), the compute slices allocated on them, and the compute of the requests the engine held since its
    last release (``held``)."""

    geom: Geometry
    i: int
    count: int
    counts: Mapping[str, float]
    prior_weight: float
    churn: float
    gpus: int
    empty: int
    allocated: int
    held: float


@dataclass(frozen=True, slots=True)
class KeptEmpty:
    """A refusal: the request would open one of ``empty`` empty GPUs, which the ``coming`` requests of ``profile``
    (the largest) that the fill still brings need."""

    profile: str
    coming: float
    empty: int


def largest(model: GpuModel) -> str:
    """The model's profile with the most compute slices (the whole GPU: 7g)."""
    return max(model.profiles, key=lambda p: p.compute_slices).name


def fill_to_come(ctx: FillContext) -> float:
    """Compute slices the rest of the fill still offers, this request's excepted (may be negative)."""
    pool = ctx.geom.model.compute_slices * ctx.gpus
    left = min(LOAD * (pool - ctx.allocated), LOAD * pool - ctx.allocated - ctx.held)
    return left - ctx.count * ctx.geom.compute[ctx.i]


def coming(
    model: GpuModel, raw: Mapping[str, float], prior_weight: float, left: float, *, trusted: bool
) -> tuple[float, float]:
    """The largest profile's arrivals in ``left`` compute slices still to come, and its share of that compute, from
    the request counts ``raw`` (blended with ``prior_weight`` pseudo-requests of the prior when ``trusted``).
    ``(0, 0)`` without counts. Profiles the model does not offer are left out."""
    counts: Mapping[str, float] = raw
    if trusted:
        weights = DemandMix(raw, prior_weight).weights(model)
        counts = {p.name: w for p, w in zip(model.profiles, weights, strict=True)}
    top = model.profile(largest(model))
    known = {p: v for p, v in counts.items() if model.has_profile(p)}
    seen = sum(known.values())
    if seen <= 0:
        return 0.0, 0.0
    mean = sum(v * model.profile(p).compute_slices for p, v in known.items()) / seen
    if mean <= 0:
        return 0.0, 0.0
    share = known.get(top.name, 0.0) * top.compute_slices / (seen * mean)
    return max(0.0, left) / mean * known.get(top.name, 0.0) / seen, share


def keeps_empty(ctx: FillContext, *, trusted: bool) -> KeptEmpty | None:
    """Whether to refuse the request: in a fill, not itself of the largest profile, while the largest's arrivals
    still to come reach the empty GPUs left. ``None``: place it."""
    if ctx.churn > 0:  # allocations end: not a fill, which is what the estimate models
        return None
    model = ctx.geom.model
    top = largest(model)
    if ctx.geom.profiles[ctx.i].name == top:
        return None
    n, _ = coming(model, ctx.counts, ctx.prior_weight, fill_to_come(ctx), trusted=trusted)
    return KeptEmpty(top, n, ctx.empty) if n >= ctx.empty else None
