"""What each pool kind isolates, said plainly: the one text pool pages, the request form and page, the API and
docs/sharing.md show. Ranks order the kinds from strongest (MIG) to weakest (time-sliced) for tenant policy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Isolation:
    kind: str
    label: str
    text: str
    rank: int  # 0 is the strongest


ISOLATION: dict[str, Isolation] = {
    "mig": Isolation(
        "mig",
        "MIG",
        "Hardware isolation: each slice has its own memory, cache and SMs; another tenant's crash or load "
        "cannot touch it.",
        0,
    ),
    "mps": Isolation(
        "mps",
        "MPS",
        "A memory limit and a compute share per tenant, but one fault domain: a crash in any tenant's job can "
        "take down every job on the GPU.",
        1,
    ),
    "shared": Isolation(
        "shared",
        "Time-sliced",
        "No isolation: tenants take turns on the whole GPU with no memory limit; a crash or a memory hog hurts "
        "every tenant on the GPU.",
        2,
    ),
}


def isolation_of(kind: str) -> Isolation:
    return ISOLATION[kind]


def weaker_warning(kind: str) -> str:
    """The warning a requester sees before submitting to a pool of this kind ("" for MIG)."""
    if kind == "mig":
        return ""
    return f"{isolation_of(kind).label} pool, weaker than MIG. {isolation_of(kind).text}"


def allowed_by_policy(*, weakest: str, kind: str) -> bool:
    """Whether a tenant whose weakest accepted kind is `weakest` may request in a pool of `kind`."""
    return isolation_of(kind).rank <= isolation_of(weakest).rank


def policy_refusal(*, tenant_name: str, weakest: str, kind: str) -> str:
    return (
        f"{tenant_name} accepts no GPU sharing weaker than {isolation_of(weakest).label}; this pool is "
        f"{isolation_of(kind).label}: {isolation_of(kind).text} Ask a platform admin to change the tenant's "
        "isolation policy, or choose another pool."
    )
