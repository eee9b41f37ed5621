"""The three what-if answers for one signed-in user: who may ask, input checks, and the JSON the API and the CLI
show (the page renders the same dataclasses).

Who may ask: platform admins, and managers of a tenant that has a quota in the pool (they plan for it). A manager
asks the quota question only about tenants they manage; admins about any. Bad input raises InvalidInput with a
message per field (400 in the API, a field error on the page); nothing here writes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from allocations.costs import gpu_model_for
from allocations.mig.catalog import UnknownGpuModel, load_catalog
from allocations.models import NodePool, Quota
from tenants.errors import InvalidInput, NotAllowed
from tenants.models import Tenant
from tenants.selectors import managed_tenant_ids

from . import selectors
from .add_gpus import AddGpusAnswer, what_if_add_gpus
from .mix import MixAnswer, best_mix
from .quota import Limits, QuotaAnswer, what_if_quota
from .replay import Capacity

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

#: Bounds of the "add N GPUs" question: a planner's order, not a typo's.
MAX_ADD_GPUS = 1024
MAX_GPUS_PER_NODE = 16
DEFAULT_GPUS_PER_NODE = 8
MAX_FACTOR = 100.0
MAX_LIMIT = 1_000_000


def may_plan(user: User | AnonymousUser, pool: NodePool) -> bool:
    """Platform admins, and managers of a tenant with a quota in the pool."""
    if not user.is_authenticated:
        return False
    if user.is_staff:
        return True
    return Quota.objects.filter(pool=pool, tenant_id__in=managed_tenant_ids(user)).exists()


def plannable_pools(user: User | AnonymousUser) -> list[NodePool]:
    """The MIG pools the user may ask what-if about (may_plan), by name: where the pages link to the what-if."""
    if not user.is_authenticated:
        return []
    pools = NodePool.objects.filter(kind=NodePool.Kind.MIG)
    if not user.is_staff:
        pools = pools.filter(quotas__tenant_id__in=managed_tenant_ids(user)).distinct()
    return list(pools.order_by("name"))


def plannable_pool(user: User | AnonymousUser, pool: NodePool) -> NodePool:
    """The pool, when the user may plan for it (else NotAllowed) and it is a MIG pool (else InvalidInput)."""
    if not may_plan(user, pool):
        raise NotAllowed("Only platform admins and managers of a tenant with quota in this pool can ask what-if.")
    if pool.is_shared:
        raise InvalidInput({"pool": [f"{pool.name} shares whole GPUs; the what-if covers MIG pools only."]})
    return pool


def add_gpus(*, pool: NodePool, count: int, model: str = "", gpus_per_node: int | None = None) -> AddGpusAnswer:
    """The pool before and after ``count`` GPUs of ``model`` (the pool's own when blank). The caller checked the
    pool with plannable_pool."""
    errors: dict[str, list[str]] = {}
    if not 1 <= count <= MAX_ADD_GPUS:
        errors["count"] = [f"Add between 1 and {MAX_ADD_GPUS} GPUs."]
    per_node = DEFAULT_GPUS_PER_NODE if gpus_per_node is None else gpus_per_node
    if not 1 <= per_node <= MAX_GPUS_PER_NODE:
        errors["gpus_per_node"] = [f"A node holds between 1 and {MAX_GPUS_PER_NODE} GPUs."]
    pool_model = gpu_model_for(pool.gpu_model)
    gpu_model = pool_model
    if model.strip():
        try:
            gpu_model = load_catalog().model(model.strip())
        except UnknownGpuModel as exc:
            errors["model"] = [str(exc)]
        else:
            missing = [p for p in pool.profiles if not gpu_model.has_profile(p)]
            if missing:
                errors["model"] = [
                    f"{gpu_model.name} has no {', '.join(missing)}: a pool holds one GPU model "
                    f"({pool.gpu_model}) and its profiles."
                ]
    if errors:
        raise InvalidInput(errors)
    now = timezone.now()
    return what_if_add_gpus(
        selectors.pool_fleet(pool),
        pool=pool.slug,
        offered=selectors.pool_offered(pool),
        model=gpu_model,
        count=count,
        gpus_per_node=per_node,
        queued=selectors.queued_asks(pool, now=now),
        refused=selectors.refused_asks(pool, now=now),
        demand=selectors.pool_demand(pool),
    )


def _tenant(user: User | AnonymousUser, given: str) -> Tenant:
    text = given.strip()
    # An id only when it is plain ASCII digits that fit the column (int() takes other digits; PostgreSQL refuses
    # integers past 2^31); anything else is a slug.
    by_id = text.isascii() and text.isdigit() and len(text) <= 9
    found = Tenant.objects.filter(pk=int(text)).first() if by_id else Tenant.objects.filter(slug=text).first()
    # A tenant the user does not manage reads as unknown: the answer would tell its quota and queue.
    if found is None or found.pk not in managed_tenant_ids(user):
        raise InvalidInput({"tenant": [f"No tenant {text!r} that you manage." if text else "Name a tenant."]})
    return found


def new_limits(
    current: Limits, *, factor: float | None, compute: int | None, memory: int | None
) -> tuple[Limits, dict[str, list[str]]]:
    """The limits asked about: explicit ones replace the current (the other kept), else ``factor`` (2 when
    nothing is given) scales both, rounded down."""
    errors: dict[str, list[str]] = {}
    if factor is not None and (compute is not None or memory is not None):
        errors["factor"] = ["Give a factor or new limits, not both."]
    if factor is not None and not (0 < factor <= MAX_FACTOR and math.isfinite(factor)):
        errors["factor"] = [f"The factor must be above 0 and at most {MAX_FACTOR:g}."]
    for name, value in (("compute", compute), ("memory", memory)):
        if value is not None and not 0 <= value <= MAX_LIMIT:
            errors[name] = [f"A limit is between 0 and {MAX_LIMIT}."]
    if compute is not None or memory is not None:
        after = Limits(current.compute if compute is None else compute, current.memory if memory is None else memory)
        return after, errors
    scale = 2.0 if factor is None else factor
    return Limits(math.floor(current.compute * scale), math.floor(current.memory * scale)), errors


def quota(
    *,
    user: User | AnonymousUser,
    pool: NodePool,
    tenant: str,
    factor: float | None = None,
    compute: int | None = None,
    memory: int | None = None,
) -> tuple[Tenant, QuotaAnswer]:
    """The tenant (id or slug, one the user manages) under its current and its new limits."""
    try:
        chosen = _tenant(user, tenant)
    except InvalidInput as exc:
        errors = exc.errors
        chosen = None
    else:
        errors = {}
    current = selectors.tenant_quota(pool, chosen.pk) if chosen else None
    after, limit_errors = new_limits(
        current.limits if current else Limits(0, 0), factor=factor, compute=compute, memory=memory
    )
    errors.update(limit_errors)
    if errors or chosen is None or current is None:
        raise InvalidInput(errors)
    now = timezone.now()
    answer = what_if_quota(
        selectors.pool_fleet(pool),
        pool=pool.slug,
        offered=selectors.pool_offered(pool),
        model=gpu_model_for(pool.gpu_model),
        tenant_id=chosen.pk,
        quota=current,
        new_limits=after,
        queue=selectors.queue_entries(pool),
        usage=selectors.usage_by_tenant(pool, now=now),
        quotas=selectors.compute_quotas(pool),
        pending=selectors.pending_asks(pool, chosen.pk),
        demand=selectors.pool_demand(pool),
    )
    return chosen, answer


def mix(*, pool: NodePool) -> MixAnswer:
    return best_mix(
        selectors.pool_fleet(pool),
        model=gpu_model_for(pool.gpu_model),
        offered=selectors.pool_offered(pool),
        mix=selectors.pool_demand(pool),
    )


def as_json(answer: AddGpusAnswer | QuotaAnswer | MixAnswer) -> dict[str, Any]:
    """The answer as JSON: dataclasses as objects, capacities with their free parts, no infinite share."""
    out: dict[str, Any] = _plain(dataclasses.asdict(answer))
    for name in ("before", "after"):
        part = getattr(answer, name, None)
        if isinstance(part, Capacity):
            out[name]["compute_free"] = part.compute_free
            out[name]["memory_free"] = part.memory_free
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # no quota: the share is infinite, JSON has no such number
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
