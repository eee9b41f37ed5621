"""How a pool's recent holds ended (issue 14), for the hold policy's price of the next one.

`ours-hold` prices a hold by the share of the pool's recent holds of the profile that were lost (allocations/mig/
policies.py `HoldingFragmentationAware.priced`). The engine learns that from the held requests it sees end; the
portal builds a fresh engine per decision, so it reads the outcomes from the database (`Allocation.hold_outcome`,
recorded by services/admission.py `end_hold` in the transaction that ends each hold) and seeds the engine with them,
decayed as the engine decays them: by the pool's requests since each ended (half-life HOLD_OUTCOME_HALF_LIFE, the
demand learner's; placement.recent_demand reads the pool's last DEMAND_WINDOW requests the same way).
"""

from __future__ import annotations

from django.db import connection

from allocations.mig.demand import DemandMix
from allocations.mig.engine import HOLD_OUTCOME_HALF_LIFE, PlacementEngine
from allocations.mig.fleet import Fleet, PlacementDecision, PlacementRequest
from allocations.mig.policies import Policy
from allocations.models import Allocation, NodePool

HoldOutcome = Allocation.HoldOutcome

#: Holds that ended before the pool's last this many requests are not read: they would weigh under 2^-8 (0.4 %).
OUTCOME_WINDOW = int(8 * HOLD_OUTCOME_HALF_LIFE)

# Per profile: (ended, lost, forced), each decayed (PlacementEngine.held_outcomes).
Outcomes = dict[str, tuple[float, float, float]]


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
    with connection.cursor() as cursor:
        cursor.execute(
            _SINCE_SQL.format(table=connection.ops.quote_name(Allocation._meta.db_table)),
            {"pool": pool.pk, "window": OUTCOME_WINDOW},
        )
        ended = cursor.fetchall()
    out: Outcomes = {}
    for profile, outcome, n in ended:
        weight = 0.5 ** (n / HOLD_OUTCOME_HALF_LIFE)
        was_ended, lost, forced = out.get(profile, (0.0, 0.0, 0.0))
        out[profile] = (
            was_ended + weight,
            lost + weight * (outcome == HoldOutcome.LOST),
            forced + weight * (outcome == HoldOutcome.FORCED),
        )
    return out


def choose_priced(
    fleet: Fleet,
    request: PlacementRequest,
    policy: str | Policy,
    demand: DemandMix,
    outcomes: Outcomes,
) -> PlacementDecision | None:
    """`choose_placement` with the pool's hold outcomes told to the engine first (`outcomes`: empty where nothing
    can be held, e.g. a forced plan or a pool without admission: then exactly `choose_placement`)."""
    engine = PlacementEngine(fleet, policy, demand)
    engine.seed_hold_outcomes(outcomes)
    return engine.choose(request)


def outcomes_for(pool: NodePool, *, force: bool) -> Outcomes:
    """What a plan in `pool` seeds its engine with: nothing to read where the plan cannot hold (forced, or the pool
    holds nothing), so plans outside admission cost no query."""
    return recent_hold_outcomes(pool) if pool.holds_requests and not force else {}
