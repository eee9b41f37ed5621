"""How a pool's recent holds ended, and how often its allocations end (issue 14): what the hold policy knows.

`ours-hold` prices a hold by the share of the pool's recent holds of the profile that were lost (allocations/mig/
policies.py `HoldingFragmentationAware.priced`). The engine learns that from the held requests it sees end; the
portal builds a fresh engine per decision, so it reads the outcomes from the database (`Allocation.hold_outcome`,
recorded by services/admission.py `end_hold` in the transaction that ends each hold) and seeds the engine with them,
decayed as the engine decays them: by the pool's requests since each ended (half-life HOLD_OUTCOME_HALF_LIFE, the
demand learner's; placement.recent_demand reads the pool's last DEMAND_WINDOW requests the same way).

It also tells the engine the pool's churn (releases per request lately, `PlacementEngine.churn`), which a fresh
engine would take for 0: `ours-hold` keeps its fill-only terms (a budget of held compute, the rollout veto, unflag)
for a pool that sees no release, the regime they were chosen in (bench/placement_hold_rules.py), and where
allocations end it holds by the rule the online replays measured (bench/placement_departures.py), as a replay's
engine does after its first release.

And it tells the engine the compute of the pool's requests held now (`PlacementEngine.held`, which `ours-hold`'s
fill budget bounds): a fresh engine has held nothing, so without it the budget never bound in the portal. The
request planned is never among them: a fresh one is not queued, and the admission pass clears a queued one's `held`
for its try (services/queue.py), so a retried held request does not count against itself. Nor is one another transaction
holds (its withdrawal in progress: _CHURN_SQL).

An admission pass tries each queued request with the placement step, and each try may plan: it reads all this once
per pass (`read_once_per_pass`) and keeps it current through the pass (`PassHistory`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from django.db import connection

from allocations.admission import outcomes_portable
from allocations.admission.fill_left import note_decision
from allocations.mig.demand import DemandMix
from allocations.mig.engine import CHURN_SMOOTHING, HOLD_OUTCOME_HALF_LIFE, PlacementEngine
from allocations.mig.fleet import Fleet, PlacementDecision, PlacementRequest
from allocations.mig.policies import Policy
from allocations.models import Allocation, NodePool

HoldOutcome = Allocation.HoldOutcome

#: Holds that ended before the pool's last this many requests are not read: they would weigh under 2^-8 (0.4 %).
OUTCOME_WINDOW = int(8 * HOLD_OUTCOME_HALF_LIFE)

# Per profile: (ended, lost, forced), each decayed (PlacementEngine.held_outcomes).
Outcomes = dict[str, tuple[float, float, float]]

#: The pool's last this many requests give its churn: the span the engine's smoothed rate mostly weighs.
CHURN_WINDOW = round(1 / CHURN_SMOOTHING)


@dataclass(frozen=True, slots=True)
class HoldHistory:
    """What a plan that may hold tells its fresh engine about the pool's past."""

    outcomes: Outcomes = field(default_factory=dict)
    #: Allocations that ended per request, over the pool's last CHURN_WINDOW requests.
    churn: float = 0.0
    #: Compute slices of the pool's requests held now (queued, `held`); the request planned is not among them.
    held: float = 0.0


NO_HISTORY = HoldHistory()


# The pool's last `window` requests and its holds that ended since the oldest of them, in one time line, newest
# first; each end counts the requests created after it (an end sorts before a request created at the same instant,
# which is not after it). One statement: a window function over both, not a count per hold (a count per hold reads
# the window once per hold: 0.8 s for 400 holds). Indexes: (pool, created_at) and the pool's ended holds.
_SINCE_SQL = """
WITH recent AS (
    SELECT created_at FROM {table} WHERE pool_id = %(pool)s ORDER BY created_at DESC LIMIT %(window)s
), line AS (
    SELECT created_at AS at, NULL AS profile, NULL AS outcome FROM recent
    UNION ALL
    SELECT hold_ended_at, profile, hold_outcome FROM {table}
    WHERE pool_id = %(pool)s AND hold_ended_at IS NOT NULL
        AND hold_ended_at >= (SELECT coalesce(min(created_at), '-infinity') FROM recent)
)
SELECT profile, outcome, since FROM (
    SELECT profile, outcome, count(*) FILTER (WHERE profile IS NULL)
        OVER (ORDER BY at DESC, profile IS NULL ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS since
    FROM line
) timeline WHERE profile IS NOT NULL
"""


def recent_hold_outcomes(pool: NodePool) -> Outcomes:
    """Per profile, the pool's holds that ended within its last OUTCOME_WINDOW requests: how many (`ended`), of
    which `lost` (no longer fit when retried or forced: they wait for room) and `forced` (placed at the deadline),
    each weighed 0.5 ** (the pool's requests created since it ended / half-life). One query (_SINCE_SQL)."""
    out: Outcomes = {}
    for profile, outcome, n in ended_holds(pool):
        weight = 0.5 ** (n / HOLD_OUTCOME_HALF_LIFE)
        was_ended, lost, forced = out.get(profile, (0.0, 0.0, 0.0))
        out[profile] = (
            was_ended + weight,
            lost + weight * (outcome == HoldOutcome.LOST),
            forced + weight * (outcome == HoldOutcome.FORCED),
        )
    return out


def ended_holds(pool: NodePool) -> list[tuple[str, str, int]]:
    """(profile, outcome, the pool's requests created since it ended) per hold of `pool` that ended within its last
    OUTCOME_WINDOW requests: one statement (_SINCE_SQL), or the ORM's few on the demo's SQLite."""
    if connection.vendor != "postgresql":
        return outcomes_portable.ended_holds(pool, OUTCOME_WINDOW)
    with connection.cursor() as cursor:
        cursor.execute(
            _SINCE_SQL.format(table=connection.ops.quote_name(Allocation._meta.db_table)),
            {"pool": pool.pk, "window": OUTCOME_WINDOW},
        )
        return [(profile, outcome, since) for profile, outcome, since in cursor.fetchall()]


def choose_priced(
    fleet: Fleet,
    request: PlacementRequest,
    policy: str | Policy,
    demand: DemandMix,
    history: HoldHistory,
) -> PlacementDecision | None:
    """`choose_placement` with the pool's hold outcomes and churn told to the engine first (`history`:
    NO_HISTORY where nothing can be held, e.g. a forced plan or a pool without admission: then exactly
    `choose_placement`)."""
    engine = PlacementEngine(fleet, policy, demand)
    engine.seed_hold_outcomes(history.outcomes)
    engine.churn = history.churn
    engine.held = history.held  # what the pool holds now: a fill's hold budget binds (ours-hold)
    decision = engine.choose(request)
    note_decision(engine.kept_empty)  # a fill-left hold is worded apart (hold.py)
    return decision


def hold_history(pool: NodePool, *, force: bool) -> HoldHistory:
    """What a plan in `pool` seeds its engine with: nothing to read where the plan cannot hold (forced, or the pool
    holds nothing), so plans outside admission cost no query."""
    if not pool.holds_requests or force:
        return NO_HISTORY
    current = _PASS.get()
    if current is not None and current.pool_id == pool.pk:
        return current.read(pool).history()  # read once in this admission pass, kept current by it
    churn, held = recent_churn_and_held(pool)
    return HoldHistory(recent_hold_outcomes(pool), churn, float(sum(held.values())))


# Allocations of the pool that held slices and ended since the oldest of its last `window` requests, how many requests
# that window holds, and the pool's requests held now with their compute ([[id, compute slices], ...], NULL for none).
# An allocation that never ran (withdrawn, refused) freed nothing: not a release.
# A held request another transaction holds (FOR SHARE SKIP LOCKED: a row lock or an update in progress; foreign-key
# checks' KEY SHARE do not conflict) is not counted: in practice its withdrawal, which the admission pass skips too
# (services/queue.py), and which would otherwise count against the budget until the next read. Counting it would
# place, for good, a request the pool could hold; leaving out one that stays held (a priority change in progress)
# holds at most that much more until the next pass or plan, which reads it again. The read's share locks (the pass
# holds these rows already; a fresh request's step holds the pool) make a withdrawal wait for the plan, not the
# other way round: SKIP LOCKED never waits, so it cannot deadlock against the lock order (services/locks.py).
_CHURN_SQL = """
WITH recent AS (
    SELECT created_at FROM {table} WHERE pool_id = %(pool)s ORDER BY created_at DESC LIMIT %(window)s
), held AS (
    SELECT id, compute_slices FROM {table} WHERE pool_id = %(pool)s AND status = %(queued)s AND held
    FOR SHARE SKIP LOCKED
)
SELECT (SELECT count(*) FROM recent), count(*), (
    SELECT array_agg(ARRAY[id, compute_slices::bigint] ORDER BY id) FROM held
) FROM {table}
WHERE pool_id = %(pool)s AND activated_at IS NOT NULL AND ended_at IS NOT NULL
    AND ended_at >= (SELECT coalesce(min(created_at), '-infinity') FROM recent)
"""


def recent_churn_and_held(pool: NodePool) -> tuple[float, dict[int, int]]:
    """Allocations of `pool` that ended per request, over its last CHURN_WINDOW requests, and its requests held now
    (id -> compute slices) but those another transaction holds (_CHURN_SQL): one query."""
    if connection.vendor != "postgresql":
        requests, ended, by_id = outcomes_portable.churn_and_held(pool, CHURN_WINDOW)  # the demo's SQLite
        return (ended / requests if requests else 0.0), by_id
    with connection.cursor() as cursor:
        cursor.execute(
            _CHURN_SQL.format(table=connection.ops.quote_name(Allocation._meta.db_table)),
            {"pool": pool.pk, "window": CHURN_WINDOW, "queued": Allocation.Status.QUEUED},
        )
        requests, ended, held = cursor.fetchone()
    return (ended / requests if requests else 0.0), {pk: compute for pk, compute in held or []}


def recent_churn(pool: NodePool) -> float:
    """Allocations of `pool` that ended per request, over its last CHURN_WINDOW requests (one query)."""
    return recent_churn_and_held(pool)[0]


@dataclass(slots=True)
class PassHistory:
    """A pool's hold history for one admission pass (services/queue.py `admit_queued`): read at its first plan that may
    hold, then kept current by the pass instead of read again for each try (N queued requests: one read, not N).

    Kept current rather than read again: the pass holds the pool's lock and its queued requests' locks, so no other
    transaction places or holds a request of the pool meanwhile, and what the pass itself changes it tells this: a
    hold that ends (services/admission.end_hold; it weighs 1, no request since: what a new read would give) and, after
    each try, whether its request is held. What others may commit meanwhile (a release, which does not lock the pool;
    a new request) would move the churn or decay the outcomes by a few 500ths of a half-life, and queues another
    pass (services/queue_entry.request_admission), which reads afresh."""

    pool_id: int
    outcomes: dict[str, tuple[float, float, float]] | None = None
    churn: float = 0.0
    #: The pool's requests held now: id -> compute slices (a request being tried is not: its try clears `held`).
    held: dict[int, int] = field(default_factory=dict)

    def read(self, pool: NodePool) -> PassHistory:
        if self.outcomes is None:
            self.churn, self.held = recent_churn_and_held(pool)
            self.outcomes = recent_hold_outcomes(pool)
        return self

    def history(self) -> HoldHistory:
        return HoldHistory(dict(self.outcomes or {}), self.churn, float(sum(self.held.values())))

    def hold_ended(self, *, profile: str, outcome: str) -> None:
        if self.outcomes is None:
            return  # not read yet: the read will see it
        ended, lost, forced = self.outcomes.get(profile, (0.0, 0.0, 0.0))
        self.outcomes[profile] = (
            ended + 1.0,
            lost + (outcome == HoldOutcome.LOST),
            forced + (outcome == HoldOutcome.FORCED),
        )

    def set_held(self, allocation: Allocation, *, held: bool) -> None:
        """The request is held now or not (before its try: not; after: as the try left it)."""
        if held:
            self.held[allocation.pk] = allocation.compute_slices
        else:
            self.held.pop(allocation.pk, None)


# The admission pass in progress in this thread, if any (read_once_per_pass).
_PASS: ContextVar[PassHistory | None] = ContextVar("fatia_admission_pass", default=None)


@contextmanager
def read_once_per_pass(pool: NodePool) -> Iterator[PassHistory]:
    """Within this block, plans in `pool` that may hold read its history once (`PassHistory`), not once per plan."""
    memo = PassHistory(pool.pk)
    token = _PASS.set(memo)
    try:
        yield memo
    finally:
        _PASS.reset(token)


def note_hold_ended(allocation: Allocation, *, outcome: str) -> None:
    """A hold ended (services/admission.end_hold): the pass in progress in its pool, if any, counts it."""
    current = _PASS.get()
    if current is not None and current.pool_id == allocation.pool_id:
        current.hold_ended(profile=allocation.profile, outcome=outcome)
