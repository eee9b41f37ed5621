"""A static-MIG node on the test control plane, for tests only: the GPUs are a fake NVML (agent/fake_nvml.py), a
thread plays NVIDIA's kubelet plugin (when its pod is deleted it republishes what the GPUs hold and its DaemonSet
starts it again), and `StandInAgent` plays the node agent's command execution.

The main end-to-end test runs the real agent (agent.runner.Agent polling the live portal for its commands).
StandInAgent takes the orchestration's batches and applies them to the fake NVML at once, through the same pynvml
calls the agent makes; the fault tests use it where they must fail a step in ways the real agent cannot be made to.
"""

from __future__ import annotations

import ctypes
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agent.fake_nvml import FakeNvml
from agent.nvml import Nvml, NvmlError
from allocations.cluster import fake_fleet, fake_static
from allocations.cluster.reconfigure import AppliedOperation, Batch
from allocations.mig.catalog import GpuModel
from allocations.mig.reconfig import Operation

PLUGIN_LABEL = "dra-driver-nvidia-gpu-component"
PLUGIN_SELECTOR = f"{PLUGIN_LABEL}=kubelet-plugin"


def scenario(node: str, model: GpuModel, layouts: Sequence[Sequence[tuple[str, int]]]) -> dict[str, Any]:
    """A fake NVML scenario: one GPU of `model` per layout, with the fake fleet's GPU UUIDs for `node`."""
    return {
        "privileged": True,
        "gpus": [
            {
                "product": model.name,
                "uuid": fake_fleet.gpu_uuid(node, i),
                "instances": [{"profile": p, "start": s} for p, s in layout],
            }
            for i, layout in enumerate(layouts)
        ],
    }


@dataclass
class StaticNode:
    name: str
    uid: str
    model: GpuModel
    lib: FakeNvml
    plugin_namespace: str
    restarts: int = 0

    def inventory(self) -> Any:
        nvml = Nvml(self.lib)
        try:
            return nvml.inventory()
        finally:
            nvml.close()

    def layout(self, gpu_index: int) -> list[tuple[str, int]]:
        gpu = self.inventory().gpus[gpu_index]
        return sorted(((gi.profile, gi.start) for gi in gpu.instances), key=lambda x: x[1])

    def mig_uuid(self, gpu_index: int, start: int) -> str:
        gpu = self.inventory().gpus[gpu_index]
        return next(ci.uuid for gi in gpu.instances if gi.start == start for ci in gi.compute_instances)


def plugin_pod(node: str) -> dict[str, Any]:
    """The kubelet plugin's pod as its DaemonSet makes it (bound to the node; no kubelet runs it here)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"dra-driver-nvidia-gpu-kubelet-plugin-{uuid.uuid4().hex[:5]}",
            "labels": {PLUGIN_LABEL: "kubelet-plugin", "app.kubernetes.io/name": "dra-driver-nvidia-gpu"},
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "gpus", "image": "registry.invalid/gpu-kubelet-plugin:test"}],
        },
    }


class FakePlugin(threading.Thread):
    """NVIDIA's kubelet plugin and its DaemonSet for one node: when the plugin pod is gone, publish the node's pool
    again from the fake NVML (a higher generation) and start a new pod."""

    def __init__(self, admin: client.ApiClient, node: StaticNode) -> None:
        super().__init__(daemon=True, name=f"fake-plugin-{node.name}")
        self.admin = admin
        self.node = node
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def pods(self) -> list[Any]:
        core = client.CoreV1Api(self.admin)
        found = core.list_namespaced_pod(
            self.node.plugin_namespace, label_selector=PLUGIN_SELECTOR, field_selector=f"spec.nodeName={self.node.name}"
        )
        return list(found.items)

    def start_pod(self) -> None:
        client.CoreV1Api(self.admin).create_namespaced_pod(self.node.plugin_namespace, body=plugin_pod(self.node.name))

    def run(self) -> None:
        while not self.stopping.wait(0.1):
            try:
                if not self.pods():
                    # counted before the slices go out: whoever sees the new slices may look at the count at once
                    self.node.restarts += 1
                    fake_static.republish_static(
                        self.admin, self.node.model, self.node.name, self.node.uid, self.node.inventory()
                    )
                    self.start_pod()
            except ApiException as exc:  # kept for the test to report; the loop goes on
                self.errors.append(str(exc))

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)


@dataclass
class StandInAgent:
    """Applies a batch to the fake NVML when it is queued; `fail` makes an operation fail like NVML would."""

    node: StaticNode
    fail: set[tuple[str, str, int]] = field(default_factory=set)
    batches: dict[str, Batch] = field(default_factory=dict)
    queued: list[tuple[str, list[Operation]]] = field(default_factory=list)

    def queue(self, *, node_id: int, gpu_index: int, operations: Sequence[Operation], batch_key: str) -> None:
        if batch_key in self.batches:
            return  # idempotent per batch key, as the contract says
        self.queued.append((batch_key, list(operations)))
        done: list[AppliedOperation] = []
        for n, op in enumerate(operations):
            try:
                if (op.action, op.profile, op.start) in self.fail:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
                mig_uuid = self._apply(gpu_index, op)
            except (pynvml.NVMLError, NvmlError) as exc:
                rest = [AppliedOperation(o.action, o.profile, o.start, "cancelled") for o in operations[n + 1 :]]
                failed = AppliedOperation(op.action, op.profile, op.start, "failed")
                self.batches[batch_key] = Batch("failed", (*done, failed, *rest), f"{op.action} {op.profile}: {exc}")
                return
            done.append(AppliedOperation(op.action, op.profile, op.start, "done", mig_uuid))
        self.batches[batch_key] = Batch("done", tuple(done))

    def state(self, *, batch_key: str) -> Batch:
        return self.batches.get(batch_key, Batch("pending"))

    def cancel(self, *, batch_key: str) -> None:
        return None

    def _apply(self, gpu_index: int, op: Operation) -> str:
        lib = self.node.lib
        if op.action == "destroy":
            nvml = Nvml(lib)
            try:
                gpu = nvml.inventory().gpus[gpu_index]
                gi = next(g for g in gpu.instances if (g.profile, g.start) == (op.profile, op.start))
                nvml.destroy_instance(gpu_index=gpu_index, gi_id=gi.gi_id)
            finally:
                nvml.close()
            return ""
        profile = self.node.model.profile(op.profile)
        lib.nvmlInit()
        try:
            h = lib.nvmlDeviceGetHandleByIndex(gpu_index)
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = op.start, profile.memory_slices
            gi = lib.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile.profile_id, ctypes.byref(placement))
            ci_profile = getattr(pynvml, f"NVML_COMPUTE_INSTANCE_PROFILE_{profile.compute_slices}_SLICE")
            lib.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
        finally:
            lib.nvmlShutdown()
        return self.node.mig_uuid(gpu_index, op.start)
