"""Whether a request is held (issue 14), and why: the decision, outside the placement steps that act on it.

A pool with admission (`NodePool.admission = hold`) plans with the hold policy (allocations/placement.pool_policy).
Planned unforced, a request that fits only where it would strand more than the policy accepts comes back None; the
same plan forced tells it apart from a request that does not fit at all. A held request waits in the queue until
`held_until` (set when it is first held: now + the pool's `max_hold_minutes`); from then on it is planned forced,
so holding delays a request by at most the bound and never starves it. A request the policy's fill-left rule refuses
(it would open an empty GPU that the fill's whole-GPU requests still need) is held the same way, with its own reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from allocations.admission.fill_left import noting_refusals
from allocations.mig.fill_left import KeptEmpty
from allocations.mig.layout import geometry
from allocations.mig.policies import FragmentationAware
from allocations.models import Allocation, NodePool
from allocations.placement import PlannedSlice, read_pool, recent_demand

# Every held request's status message starts its reason with this (services.hold_allocation), for people; the
# code tells a held request from one that waits for room by `Allocation.held` (is_held below).
HELD_REASON = "held to keep room for larger requests"

# What the message measures stranding with: `ours`' expected stranded compute (the rule `ours-hold` holds by).
_MEASURE = FragmentationAware()


@dataclass(frozen=True, slots=True)
class Hold:
    """A request held: until when at the latest, and what its best placement would strand (compute slices)."""

    until: datetime
    stranded: float
    #: Held by the policy's fill-left rule instead (allocations/mig/fill_left.py): it would open an empty GPU that the
    #: whole-GPU requests still expected while the pool fills need (then `stranded` is not measured: 0).
    kept_empty: KeptEmpty | None = None

    @property
    def reason(self) -> str:
        at = self.until.astimezone(UTC)
        kept = self.kept_empty
        if kept is not None:
            gpus = "1 empty GPU" if kept.empty == 1 else f"{kept.empty} empty GPUs"
            why = (
                f"empty GPUs are kept for the whole-GPU requests still expected while the pool fills "
                f"(about {kept.coming:.1f} x {kept.profile} for {gpus})"
            )
        else:
            why = f"every placement would strand {self.stranded:.1f} compute slices"
        return f"{HELD_REASON}: {why}; placed at the latest at {at:%H:%M} UTC"


def is_due(allocation: Allocation, *, now: datetime) -> bool:
    """Held long enough: placed wherever it fits (forced) from now on."""
    return allocation.held_until is not None and allocation.held_until <= now


def plans_forced(pool: NodePool, allocation: Allocation, *, now: datetime | None = None) -> bool:
    """Placement may not hold it: the pool holds nothing, or it has been held long enough. A replan in the same step
    (around a lender's fence, allocations/cohorts/fence.py) uses the same answer, so it cannot place a request
    that the first plan would have held."""
    return not pool.holds_requests or is_due(allocation, now=now or timezone.now())


def is_held(allocation: Allocation) -> bool:
    """Waits in the queue because it was held (not for room): `Allocation.held`, which the services that hold,
    place, force, withdraw or fail a request set and clear with its status (a constraint keeps it to QUEUED rows).
    Querysets filter on `held=True` the same way."""
    return allocation.held


def plan_or_hold(
    *,
    pool: NodePool,
    allocation: Allocation,
    plan: Callable[[bool], list[PlannedSlice] | None],
    now: datetime | None = None,
) -> tuple[list[PlannedSlice] | None, Hold | None]:
    """The request's slices (`plan(force)`, the backend's planner), or why it is held. (None, None): it does not
    fit at all. A pool without admission, or a request held long enough, is planned forced: nothing is held."""
    now = now or timezone.now()
    if plans_forced(pool, allocation, now=now):
        return plan(True), None
    with noting_refusals() as refusals:
        slices = plan(False)
    if slices is not None:
        return slices, None
    forced = plan(True)
    if forced is None:
        return None, None
    until = allocation.held_until or now + timedelta(minutes=pool.max_hold_minutes)
    if refusals.kept_empty is not None:  # the fill-left rule held it: its own reason, nothing stranded to measure
        return None, Hold(until=until, stranded=0.0, kept_empty=refusals.kept_empty)
    return None, Hold(until=until, stranded=stranded_by(pool, profile=allocation.profile, slices=forced))


def stranded_by(pool: NodePool, *, profile: str, slices: list[PlannedSlice]) -> float:
    """How many compute slices the pool's demand would use that placing `slices` strands, in expectation: the
    change of `ours`' expected stranded compute on the GPUs they go to (allocations/mig/policies.py)."""
    layout = read_pool(pool)
    mix = recent_demand(pool)
    starts: dict[tuple[str, int], list[int]] = defaultdict(list)
    for s in slices:
        starts[(s.node_name, s.gpu_index)].append(s.start)
    total = 0.0
    for position, planned in starts.items():
        model = layout.models[position]
        geom = geometry(model)
        weights = mix.weights(model)
        key = geom.named_key(tuple([(i.profile, i.start, False) for i in layout.fleet.gpu(*position).instances]))
        before = _MEASURE.expected_stranded(geom, key, weights)
        index = geom.profile_index(profile)
        for start in planned:
            option = next((o for o in geom.options(key, index) if o.start == start), None)
            if option is None:
                break  # the scheduler's slot is not a legal one here: measure what is known
            key = option.after
        total += _MEASURE.expected_stranded(geom, key, weights) - before
    return max(total, 0.0)
