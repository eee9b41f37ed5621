"""Static MIG, MIG-manager mode: the reconfiguration orchestration's applier (pool mode ``static-manager``).

mig-parted applies a whole node entry, so a batch becomes the node's full layout in counts: the planned GPU's
instances after the operations, every other GPU's current instances (Gpu.static_instances, what the node last
published). `queue` writes that config and points the node at it (allocations/cluster/migmanager.py) and records
the batch key in a node annotation; `state` maps the manager's state label to the batch's state. Counts, not
slots: the driver picks where each instance goes, so a successful batch reports the plan's operations as done
without MIG device UUIDs, and the orchestration accepts any published layout with the planned counts.

A retry of a failed batch asks for the same config (same counts, same name): the manager is not asked again and
the retry reads the same failure, which ends the reconfiguration with the manager's reason. Nothing is ever
half-applied that the portal would have to roll back (mig-parted applies an entry whole or reports failure).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from allocations.cluster import kube, migmanager
from allocations.cluster.reconfigure import AppliedOperation, Batch
from allocations.mig.migparted import InvalidManagerLayout
from allocations.mig.reconfig import Operation
from allocations.models import Gpu, MigReconfiguration, Node
from allocations.services.reconfiguration import layout_after, layout_of, operations_of

# The batch whose config the node was last pointed at (the reconfiguration's key, e.g. reconfiguration:7:apply-1).
BATCH_ANNOTATION = "fatia.io/mig-config-batch"


def node_layout(*, node_id: int, gpu_index: int, operations: Sequence[Operation]) -> dict[int, dict[str, int]]:
    """Profile counts per GPU index of the node once `operations` are applied to GPU `gpu_index`."""
    layout: dict[int, dict[str, int]] = {}
    for gpu in Gpu.objects.filter(node_id=node_id).order_by("index"):
        instances = layout_of(gpu)
        if gpu.index == gpu_index:
            instances = layout_after(instances, operations)
        layout[gpu.index] = dict(Counter(profile for profile, _ in instances))
    return layout


def _reconfiguration_of(batch_key: str) -> MigReconfiguration | None:
    # Keys are reconfigure._key's: reconfiguration:<id>:<step>.
    parts = batch_key.split(":")
    if len(parts) != 3 or parts[0] != "reconfiguration" or not parts[1].isdigit():
        return None
    return MigReconfiguration.objects.select_related("gpu__node").filter(pk=int(parts[1])).first()


class ManagerApplier:
    """NVIDIA's MIG manager applies the batch (one node entry of the mig-parted ConfigMap)."""

    def queue(self, *, node_id: int, gpu_index: int, operations: Sequence[Operation], batch_key: str) -> None:
        node_name = Node.objects.values_list("name", flat=True).get(pk=node_id)
        layout = node_layout(node_id=node_id, gpu_index=gpu_index, operations=operations)
        try:
            migmanager.apply_manager_layout(node_name=node_name, layout=layout)
        except (InvalidManagerLayout, migmanager.MigManagerError) as exc:
            # Terminal: the orchestration ends the reconfiguration FAILED with this message.
            raise kube.KubeRejected(f"the MIG manager cannot be asked for this layout: {exc}") from exc
        kube.patch_node_metadata(node_name, labels={}, annotations={BATCH_ANNOTATION: batch_key})

    def state(self, *, batch_key: str) -> Batch:
        reconfiguration = _reconfiguration_of(batch_key)
        if reconfiguration is None:
            return Batch(status="failed", error=f"No reconfiguration for batch {batch_key}.")
        node_name = reconfiguration.gpu.node.name
        metadata = kube.read_node_metadata(node_name)
        if metadata is None:
            return Batch(status="failed", error=f"Node {node_name} no longer exists.")
        if metadata.annotations.get(BATCH_ANNOTATION) != batch_key:
            return Batch(status="failed", error=f"{node_name} was pointed at another MIG config since.")
        config = metadata.labels.get(migmanager.CONFIG_LABEL, "")
        found = migmanager.manager_apply_status(node_name, config)
        plan = operations_of(reconfiguration.plan)
        if found.state == "pending":
            return Batch(status="running")
        status = "done" if found.state == "success" else "failed"
        return Batch(
            status=status,
            operations=tuple(AppliedOperation(op.action, op.profile, op.start, status) for op in plan),
            error=f"The MIG manager failed: {found.reason}" if status == "failed" else "",
        )

    def cancel(self, *, batch_key: str) -> None:
        # The manager cannot be stopped mid-apply; whatever it leaves is republished by the plugin afterwards.
        return None
