"""The demand mix: which profiles tenants ask for, learnt from recent requests.

Our placement policy keeps room for the profiles that are actually requested, so it needs their
relative frequency. :class:`DemandLearner` keeps exponentially decayed request counts per profile
name; a :class:`DemandMix` is an immutable snapshot of them blended with a default prior, so that a
new pool (no history) still behaves sensibly.

The learner only publishes a new snapshot when the mix has moved noticeably (L1 distance over a
threshold, and at least ``min_interval`` requests after the previous one): the engine caches its ranks
per snapshot, re-ranking costs up to tens of milliseconds on a fleet with thousands of distinct
layouts, and sampling noise alone moves a decayed mix by a few percent.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .catalog import GpuModel, MigProfile

_versions = itertools.count(1)

#: Default share of requests by profile shape (compute slices as a fraction of the GPU, and whether it
#: is the double-memory 1-slice profile). Small slices dominate portal requests; whole GPUs are kept
#: in the prior so that a pool without history still keeps some GPUs whole.
_DEFAULT_SHARES = {"1g": 0.30, "1g.2x": 0.10, "2g": 0.25, "3g": 0.12, "4g": 0.08, "full": 0.15}


def _shape(model: GpuModel, p: MigProfile) -> str | None:
    if "+" in p.name or p.name.endswith("-me"):
        return None  # media/graphics variants: rare, and they share their plain profile's shape
    if p.compute_slices == model.compute_slices:
        return "full"
    if p.compute_slices == 1:
        smallest = min(q.memory_slices for q in model.profiles if q.compute_slices == 1)
        return "1g" if p.memory_slices == smallest else "1g.2x"
    return {2: "2g", 3: "3g", 4: "4g"}.get(p.compute_slices)


def default_shares(model: GpuModel) -> dict[str, float]:
    """The prior mix for a model, by profile name, summing to 1."""
    raw = {p.name: _DEFAULT_SHARES.get(_shape(model, p) or "", 0.0) for p in model.profiles}
    total = sum(raw.values()) or 1.0
    return {k: v / total for k, v in raw.items()}


@dataclass(frozen=True, slots=True)
class DemandMix:
    """Request counts by profile name plus ``prior_weight`` pseudo-requests spread as the default mix.

    ``version`` is unique per snapshot; caches key on it.
    """

    counts: Mapping[str, float] = field(default_factory=dict)
    prior_weight: float = 1.0
    version: int = field(default_factory=lambda: next(_versions))
    _per_model: dict[int, tuple[GpuModel, tuple[float, ...]]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", MappingProxyType(dict(self.counts)))

    @classmethod
    def from_shares(cls, shares: Mapping[str, float]) -> DemandMix:
        """A fixed mix (no prior), e.g. for tests or a known workload."""
        return cls(counts=shares, prior_weight=0.0)

    def weights(self, model: GpuModel) -> tuple[float, ...]:
        """Share of each of ``model``'s profiles (in profile order), summing to 1."""
        cached = self._per_model.get(id(model))
        if cached is not None and cached[0] is model:
            return cached[1]
        prior = default_shares(model)
        raw = [self.counts.get(p.name, 0.0) + self.prior_weight * prior[p.name] for p in model.profiles]
        total = sum(raw)
        if total <= 0:  # nothing requested on this model yet and no prior: use the default
            raw, total = [prior[p.name] for p in model.profiles], 1.0
        out = tuple(w / total for w in raw)
        self._per_model[id(model)] = (model, out)
        return out


class DemandLearner:
    """Exponentially decayed request counts; :meth:`mix` returns the current snapshot.

    ``half_life`` is in requests: a request's weight halves after that many newer ones.
    """

    def __init__(
        self,
        half_life: float = 500.0,
        prior_weight: float = 20.0,
        republish_distance: float = 0.1,
        min_interval: int = 100,
    ) -> None:
        self._decay = 0.5 ** (1.0 / half_life)
        self._counts: dict[str, float] = {}
        self._prior_weight = prior_weight
        self._threshold = republish_distance
        self._min_interval = min_interval
        self._since = 0
        self._published = DemandMix({}, prior_weight)

    def observe(self, profile: str, count: int = 1) -> None:
        for name in self._counts:
            self._counts[name] *= self._decay**count
        self._counts[profile] = self._counts.get(profile, 0.0) + count
        self._since += 1

    def counts(self) -> dict[str, float]:
        """The decayed request counts now (the published :meth:`mix` may lag them by up to
        ``min_interval`` requests)."""
        return dict(self._counts)

    def mix(self) -> DemandMix:
        current = self._published
        if self._since < self._min_interval // 10:
            return current
        moved = _distance(current.counts, current.prior_weight, self._counts, self._prior_weight)
        # Small moves (sampling noise, slow drift) wait for min_interval; a big shift, such as a new
        # pool's real mix replacing the prior, is published after a tenth of it.
        if moved > 2.5 * self._threshold or (moved > self._threshold and self._since >= self._min_interval):
            current = DemandMix(dict(self._counts), self._prior_weight)
            self._published = current
            self._since = 0
        return current


def _distance(a: Mapping[str, float], pa: float, b: Mapping[str, float], pb: float) -> float:
    """L1 distance between two count vectors after normalising (prior counted as one more entry)."""
    ta = sum(a.values()) + pa
    tb = sum(b.values()) + pb
    if ta <= 0 or tb <= 0:
        return 0.0 if ta == tb else 2.0
    keys = set(a) | set(b)
    return abs(pa / ta - pb / tb) + sum(abs(a.get(k, 0.0) / ta - b.get(k, 0.0) / tb) for k in keys)
