"""Changing a static-MIG GPU's layout: the state of a MigReconfiguration and of its node (issue 12).

The orchestration (allocations/cluster/reconfigure.py) drives each reconfiguration one step at a time from a
Celery task and calls these services for every state change, so each change is one transaction with its audit
event. Locks: the allocation (when one is given), then the pool, then the node; never the quota.

While a reconfiguration of one of its GPUs is live, a node is `reconfiguring`: placement reads only READY
nodes (placement.read_pool), so nothing else is planned there while instances come and go.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from allocations.costs import gpu_model_for
from allocations.mig.catalog import GpuModel
from allocations.mig.layout import geometry
from allocations.mig.reconfig import Operation
from allocations.models import Gpu, MigReconfiguration, Node, NodePool
from allocations.services.locks import lock_allocation, lock_pool
from allocations.services.outbox import enqueue_task
from tenants.errors import InvalidInput
from tenants.services import record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

Status = MigReconfiguration.Status
MAX_OPERATIONS = 32  # a GPU has at most 8 memory slots: a real plan is a dozen operations


def queue_advance(reconfiguration_id: int) -> None:
    enqueue_task("allocations.tasks.advance_reconfiguration_task", reconfiguration_id)


def operations_json(operations: Sequence[Operation]) -> list[dict[str, Any]]:
    return [{"action": op.action, "profile": op.profile, "start": op.start} for op in operations]


def operations_of(plan: Sequence[dict[str, Any]]) -> list[Operation]:
    return [Operation(action=p["action"], profile=p["profile"], start=int(p["start"])) for p in plan]


def layout_of(gpu: Gpu) -> list[tuple[str, int]]:
    """The (profile, start) of the MIG devices the GPU's node last published (static MIG)."""
    return [(str(i["profile"]), int(i["start"])) for i in gpu.static_instances]


def layout_after(layout: Sequence[tuple[str, int]], operations: Sequence[Operation]) -> list[tuple[str, int]]:
    current = list(layout)
    for op in operations:
        if op.action == "destroy":
            current.remove((op.profile, op.start))
        else:
            current.append((op.profile, op.start))
    return sorted(current, key=lambda x: x[1])


def checked_operations(model: GpuModel, layout: Sequence[tuple[str, int]], operations: Sequence[Operation]) -> None:
    """InvalidInput naming the first operation that is not a valid step from `layout`: an unknown action or
    profile, a destroy of an instance that is not there, or a create that breaks the MIG placement rules (every
    intermediate layout must be valid, as the planner guarantees)."""
    if not operations:
        raise InvalidInput({"operations": ["Give at least one operation."]})
    if len(operations) > MAX_OPERATIONS:
        raise InvalidInput({"operations": [f"At most {MAX_OPERATIONS} operations."]})
    geom = geometry(model)
    current = list(layout)
    for n, op in enumerate(operations, start=1):
        if op.action not in ("create", "destroy"):
            raise InvalidInput({"operations": [f"Operation {n}: the action is create or destroy, not {op.action!r}."]})
        if not model.has_profile(op.profile):
            raise InvalidInput({"operations": [f"Operation {n}: {model.name} has no MIG profile {op.profile!r}."]})
        if op.action == "destroy":
            if (op.profile, op.start) not in current:
                raise InvalidInput(
                    {"operations": [f"Operation {n}: no {op.profile} instance at {op.start} to destroy."]}
                )
            current.remove((op.profile, op.start))
            continue
        problems = geom.violations([*current, (op.profile, op.start)])
        if problems:
            raise InvalidInput({"operations": [f"Operation {n}: {op.profile} at {op.start}: {'; '.join(problems)}."]})
        current.append((op.profile, op.start))


def _lock_node(node_id: int) -> Node:
    return Node.objects.select_for_update(no_key=True, of=("self",)).get(pk=node_id)


@transaction.atomic
def request_reconfiguration(
    *,
    gpu_id: int,
    operations: Sequence[Operation],
    reason: str,
    allocation_id: int | None = None,
    actor: User | None = None,
) -> MigReconfiguration:
    """Create a reconfiguration of one GPU of a static-agent pool, mark its node reconfiguring and queue its first
    step after commit (advance_reconfiguration_task).

    Idempotent: while one is live for the same GPU and the same allocation, or the same operations, that one is
    returned. InvalidInput when the GPU is not in a static-MIG pool, another change of it is in progress, or an
    operation is not a valid step from the layout its node publishes (checked_operations). Locks the allocation
    (when given), then the pool, then the node."""
    if allocation_id is not None:
        lock_allocation(allocation_id=allocation_id)
    gpu = Gpu.objects.select_related("node").filter(pk=gpu_id).first()
    if gpu is None or gpu.node.pool_id is None:
        raise InvalidInput({"gpu_id": ["No GPU with this id in a pool."]})
    pool = lock_pool(pool_id=gpu.node.pool_id)
    if pool.mig_mode == NodePool.MigMode.DYNAMIC:
        raise InvalidInput({"gpu_id": [f"{pool.name} uses DynamicMIG: the driver makes its instances itself."]})
    node = _lock_node(gpu.node_id)
    live = MigReconfiguration.objects.filter(gpu_id=gpu_id, status__in=MigReconfiguration.LIVE).first()
    plan = operations_json(operations)
    if live is not None:
        if (allocation_id is not None and live.allocation_id == allocation_id) or live.plan == plan:
            return live
        raise InvalidInput({"gpu_id": [f"{gpu} is being reconfigured already (reconfiguration #{live.pk})."]})
    if allocation_id is not None:  # a request spread over GPUs has one live change per GPU
        mine = MigReconfiguration.objects.filter(
            allocation_id=allocation_id, gpu_id=gpu_id, status__in=MigReconfiguration.LIVE
        )
        found = mine.first()
        if found is not None:
            return found
    checked_operations(gpu_model_for(pool.gpu_model), layout_of(gpu), operations)
    if node.state not in (Node.State.READY, Node.State.RECONFIGURING):
        raise InvalidInput({"gpu_id": [f"{node.name} is {node.get_state_display().lower()}: no change goes there."]})
    reconfiguration = MigReconfiguration.objects.create(
        gpu=gpu,
        allocation_id=allocation_id,
        requested_by=actor,
        reason=reason[:500],
        plan=plan,
        targets=[[p, s] for p, s in layout_after(layout_of(gpu), operations)],
    )
    _set_node_state(node, Node.State.RECONFIGURING, reconfiguration)
    record_audit_event(
        actor=actor,
        verb="reconfiguration_requested",
        obj=reconfiguration,
        after={"node": node.name, "gpu": gpu.index, "plan": plan, "reason": reconfiguration.reason},
    )
    queue_advance(reconfiguration.pk)
    return reconfiguration


def _set_node_state(node: Node, state: str, reconfiguration: MigReconfiguration) -> None:
    if node.state == state:
        return
    before = node.state
    node.state = state
    node.save(update_fields=["state", "updated_at"])
    record_audit_event(
        actor=None,
        verb="node_reconfiguring" if state == Node.State.RECONFIGURING else "node_reconfigured",
        obj=node,
        before={"state": before},
        after={"state": state, "reconfiguration": reconfiguration.pk},
    )


def lock_reconfiguration(*, reconfiguration_id: int) -> MigReconfiguration:
    return (
        MigReconfiguration.objects.select_for_update(of=("self",))
        .select_related("gpu__node")
        .get(pk=reconfiguration_id)
    )


@transaction.atomic
def move_reconfiguration(
    *,
    reconfiguration_id: int,
    expected: str,
    status: str,
    step: str | None = None,
    attempts: int | None = None,
    pool_generation: int | None = None,
    error: str | None = None,
) -> MigReconfiguration | None:
    """One step forward: `expected` -> `status` (and the step, attempts, generation, error given), audited.
    Returns None when the reconfiguration is no longer in `expected` (another run moved it: the caller stops),
    so a redelivered task never does a step twice. Locks the reconfiguration."""
    reconfiguration = lock_reconfiguration(reconfiguration_id=reconfiguration_id)
    if reconfiguration.status != expected:
        return None
    before = {"status": reconfiguration.status, "step": reconfiguration.step}
    reconfiguration.status = status
    reconfiguration.step_started_at = timezone.now()
    if step is not None:
        reconfiguration.step = step
    if attempts is not None:
        reconfiguration.attempts = attempts
    if pool_generation is not None:
        reconfiguration.pool_generation = pool_generation
    if error is not None:
        reconfiguration.error = error[:2000]
    reconfiguration.save()
    record_audit_event(
        actor=None,
        verb="reconfiguration_step",
        obj=reconfiguration,
        before=before,
        after={"status": status, "step": reconfiguration.step, **({"error": error} if error else {})},
    )
    return reconfiguration


@transaction.atomic
def finish_reconfiguration(
    *, reconfiguration_id: int, instances: list[dict[str, Any]] | None, error: str = ""
) -> MigReconfiguration:
    """RESTARTING -> DONE (or FAILED when `error`, or an error recorded earlier, says so): the GPU's static
    instances set to what the node now publishes (`instances`; None: unknown, left for discovery), the node
    ready again (unless another change of it is live). Idempotent. Locks the pool, then the node, then the
    reconfiguration (placement reads node states and instances under the pool lock)."""
    gpu = Gpu.objects.select_related("node").get(reconfigurations__pk=reconfiguration_id)
    if gpu.node.pool_id is not None:
        lock_pool(pool_id=gpu.node.pool_id)
    node = _lock_node(gpu.node_id)
    reconfiguration = lock_reconfiguration(reconfiguration_id=reconfiguration_id)
    if reconfiguration.status not in MigReconfiguration.LIVE:
        return reconfiguration
    final_error = error or reconfiguration.error
    before = reconfiguration.status
    reconfiguration.status = Status.FAILED if final_error else Status.DONE
    reconfiguration.error = final_error[:2000]
    reconfiguration.finished_at = timezone.now()
    reconfiguration.save(update_fields=["status", "error", "finished_at", "updated_at"])
    if instances is not None:
        Gpu.objects.filter(pk=gpu.pk).update(static_instances=instances)
    others = MigReconfiguration.objects.filter(gpu__node=node, status__in=MigReconfiguration.LIVE)
    if node.state == Node.State.RECONFIGURING and not others.exists():
        _set_node_state(node, Node.State.READY, reconfiguration)
    record_audit_event(
        actor=None,
        verb="reconfiguration_finished",
        obj=reconfiguration,
        before={"status": before},
        after={"status": reconfiguration.status, **({"error": final_error} if final_error else {})},
    )
    return reconfiguration
