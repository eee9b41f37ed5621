"""Where a request's claims are, and what a pod needs to use them: the pod-level claim references, the pool's
tolerations and its node selection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from allocations.cluster.labels import InvalidSelector, parse_selector

#: The name a pod spec gives the claim (`spec.resourceClaims[].name`, `resources.claims[].name`); with several
#: claims `fatia-gpu-0`, `fatia-gpu-1`, ... Prefixed so that attaching never takes a name the user's spec has.
REF_NAME = "fatia-gpu"

# Label selector operators (allocations/cluster/labels.py) as node affinity operators.
_AFFINITY_OPERATORS = {
    "exists": "Exists",
    "!exists": "DoesNotExist",
    "=": "In",
    "in": "In",
    "!=": "NotIn",
    "notin": "NotIn",
}


@dataclass(frozen=True, slots=True)
class ClaimTarget:
    """An active request's claims as a workload sees them.

    `shared`: a request of a time-sliced or MPS pool, one claim per share (each share may be on another GPU or
    node, so one pod takes one share). `memory_fraction`: such a share's part of its GPU's memory, which a vLLM
    server must be told (it would size its cache for the whole GPU otherwise); None for MIG slices, whose
    instance shows only its own memory."""

    request_id: int
    namespace: str
    claim_names: tuple[str, ...]
    shared: bool = False
    tolerations: tuple[dict[str, Any], ...] = ()
    node_selector: str = ""
    memory_fraction: float | None = None

    def claim_groups(self, share: int | None) -> list[tuple[str, ...]]:
        """The claims each pod takes: all of them together for MIG slices (a claim holds at most 32 slices, and
        the claims of one request are allocated together, on one node); one each for shares, or only `share`."""
        if not self.shared:
            return [self.claim_names]
        if share is not None:
            return [(self.claim_names[share],)]
        return [(name,) for name in self.claim_names]


def ref_names(count: int) -> list[str]:
    return [REF_NAME] if count == 1 else [f"{REF_NAME}-{k}" for k in range(count)]


def pod_claims(claims: tuple[str, ...]) -> list[dict[str, str]]:
    """`spec.resourceClaims` for these claims."""
    return [
        {"name": ref, "resourceClaimName": claim} for ref, claim in zip(ref_names(len(claims)), claims, strict=True)
    ]


def container_claims(claims: tuple[str, ...]) -> list[dict[str, str]]:
    """`resources.claims` of a container that uses every one of them."""
    return [{"name": ref} for ref in ref_names(len(claims))]


def node_affinity(selector_text: str) -> dict[str, Any] | None:
    """The pool's node selector as required node affinity; None for a pool without one (or one that no longer
    parses: the claim's allocation picks the node anyway, the affinity only says so up front)."""
    if not selector_text.strip():
        return None
    try:
        selector = parse_selector(selector_text)
    except InvalidSelector:
        return None
    expressions = []
    for r in selector.requirements:
        expression: dict[str, Any] = {"key": r.key, "operator": _AFFINITY_OPERATORS[r.operator]}
        if r.values:
            expression["values"] = list(r.values)
        expressions.append(expression)
    if not expressions:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
        }
    }
