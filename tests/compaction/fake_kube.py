"""A fake of the adapter's claim, holder-pod and steering functions (allocations/cluster/kube.py) for the compaction
move tests: it keeps what was applied, in memory, and plays kube-scheduler only when a test says where a claim is
allocated (`allocate`). `fail_on` makes one function raise once, as a dying worker or an API outage would. Tests
install it with `install(monkeypatch)`, which replaces those functions of the `kube` module and nothing else."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from allocations.cluster import kube

Key = tuple[str, str]


@dataclass
class FakeKube:
    claims: dict[Key, kube.ClaimSpec] = field(default_factory=dict)
    pods: dict[Key, kube.HolderPodSpec] = field(default_factory=dict)
    allocated: dict[Key, kube.ClaimAllocation] = field(default_factory=dict)
    steering: dict[str, tuple[str, ...]] = field(default_factory=dict)  # allocation uuid -> tainted devices
    nodes: tuple[str, ...] = ()
    calls: Counter[str] = field(default_factory=Counter)
    # function name -> the error it raises on its next call
    fail_on: dict[str, kube.KubeError] = field(default_factory=dict)
    # True: a deleted claim stays listed, deleting, until `finalize` (the DRA controller's finalizer, which it removes
    # once the claim is deallocated); False: it is gone at once.
    finalizers: bool = False
    deleting: set[Key] = field(default_factory=set)

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        error = self.fail_on.pop(name, None)
        if error is not None:
            raise error

    # --- the adapter's functions ---------------------------------------------------------------------------

    def apply_resource_claim(self, spec: kube.ClaimSpec) -> None:
        self._call("apply_resource_claim")
        self.claims[(spec.namespace, spec.name)] = spec

    def apply_holder_pod(self, spec: kube.HolderPodSpec) -> None:
        self._call("apply_holder_pod")
        self.pods[(spec.namespace, spec.name)] = spec

    def apply_steering(self, spec: kube.SteeringSpec) -> None:
        self._call("apply_steering")
        self.steering[spec.allocation_uuid] = spec.devices

    def delete_steering(self, allocation_uuid: str) -> None:
        self._call("delete_steering")
        self.steering.pop(allocation_uuid, None)

    def read_claim(self, namespace: str, name: str) -> kube.ClaimState | None:
        self._call("read_claim")
        spec = self.claims.get((namespace, name))
        if spec is None:
            return None
        return kube.ClaimState(
            namespace=namespace,
            name=name,
            labels={kube.LABEL_ALLOCATION: spec.allocation_uuid},
            allocation=self.allocated.get((namespace, name)),
            deleting=(namespace, name) in self.deleting,
            selectors=kube.claim_selectors(spec),
        )

    def delete_holder_pod(self, namespace: str, name: str) -> None:
        self._call("delete_holder_pod")
        self.pods.pop((namespace, name), None)

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        self._call("delete_resource_claim")
        if self.finalizers and (namespace, name) in self.claims:
            self.deleting.add((namespace, name))
            return
        self.claims.pop((namespace, name), None)
        self.allocated.pop((namespace, name), None)

    def finalize(self) -> None:
        """The DRA controller deallocates the claims being deleted and removes their finalizer: they are gone."""
        for key in self.deleting:
            self.claims.pop(key, None)
            self.allocated.pop(key, None)
        self.deleting.clear()

    def list_claims(self, label_selector: str) -> list[kube.ClaimState]:
        self._call("list_claims")
        return [c for ns, name in sorted(self.claims) if (c := self.read_claim(ns, name)) is not None]

    def list_holder_pods(self, label_selector: str) -> list[kube.HolderPodState]:
        self._call("list_holder_pods")
        return [
            kube.HolderPodState(
                namespace=ns, name=name, labels={kube.LABEL_ALLOCATION: pod.allocation_uuid}, phase="Running"
            )
            for (ns, name), pod in sorted(self.pods.items())
        ]

    def list_node_names(self) -> set[str]:
        self._call("list_node_names")
        return set(self.nodes)

    def list_steering(self) -> set[str]:
        self._call("list_steering")
        return set(self.steering)

    # --- the scheduler's part -------------------------------------------------------------------------------

    def allocate(self, namespace: str, name: str, node: str, device: str) -> None:
        """kube-scheduler allocated claim `name` (which must exist, with a pod) at `node`/`device`."""
        assert (namespace, name) in self.claims and (namespace, name) in self.pods
        self.allocated[(namespace, name)] = kube.ClaimAllocation(
            node_name=node,
            devices=(kube.AllocatedDevice(request="mig-0", driver=kube.DRIVER, pool=node, device=device),),
        )

    def names(self, prefix: str) -> tuple[list[str], list[str]]:
        """The claims and holder pods whose names start with `prefix` (one allocation's: mig-alloc-<uuid>)."""
        return (
            sorted(n for _, n in self.claims if n.startswith(prefix)),
            sorted(n for _, n in self.pods if n.startswith(prefix)),
        )


FUNCTIONS = (
    "apply_resource_claim",
    "apply_holder_pod",
    "apply_steering",
    "delete_steering",
    "read_claim",
    "delete_holder_pod",
    "delete_resource_claim",
    "list_claims",
    "list_holder_pods",
    "list_node_names",
    "list_steering",
)


def install(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    fake = FakeKube()
    for name in FUNCTIONS:
        monkeypatch.setattr(kube, name, getattr(fake, name))
    return fake
