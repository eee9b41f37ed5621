"""Static MIG, MIG-manager mode, end to end on the local control plane (issue 12): a request that needs a new layout
-> the node's whole layout written as a mig-parted entry and the node pointed at it -> a fake MIG manager applies it
to the fake NVML (the driver's slots, not the planner's) -> the DRA plugin restarted and the slices republished ->
a claim pinned by the uuid of whatever instance of the profile appeared on that GPU.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
import yaml
from kubernetes import client

from allocations import services
from allocations.cluster import migmanager, reconfigure
from allocations.mig.migparted import CONFIG_KEY, find_packing
from allocations.mig.reconfig import Operation
from allocations.models import Allocation, Gpu, MigReconfiguration, Node
from tests.kube.conftest import wait_for
from tests.kube.static_fleet import StandInAgent, StaticNode
from tests.kube.test_migmanager import MANAGER_NAMESPACE, FakeMigManager, mig_manager_rights  # noqa: F401
from tests.kube.test_provisioning import claim_json, request, settled
from tests.kube.test_static_mig import LAYOUTS, StaticWorld, static_world  # noqa: F401

Status = Allocation.Status
RStatus = MigReconfiguration.Status


@pytest.fixture
def mig_mode() -> str:
    return "static-manager"


class NvmlMigManager(FakeMigManager):
    """The MIG manager on the static node: applies the entry its label names to the fake NVML, each GPU whose
    counts differ rebuilt where the driver packs them (mig-parted has no slots), then sets the state label."""

    def __init__(
        self, admin: client.ApiClient, node: StaticNode, configmap: str, *, fail_with: str = "", slow_s: float = 0
    ) -> None:
        super().__init__(admin, node.name, configmap, fail_with=fail_with)
        self.static = node
        self.hands = StandInAgent(node)
        self.slow_s = slow_s  # how long it stays pending (a reboot, say)

    def run(self) -> None:
        try:
            name = wait_for(f"{migmanager.CONFIG_LABEL} on {self.node}", self._requested, timeout=60)
            self.label("pending")
            time.sleep(self.slow_s)
            found = self.core.read_namespaced_config_map(self.configmap, MANAGER_NAMESPACE)
            self.applied = yaml.safe_load(found.data[CONFIG_KEY])["mig-configs"][name]
            if self.fail_with:
                self._warn(self.fail_with)
                self.label("failed")
                return
            for entry in self.applied:
                for index in entry["devices"]:
                    self._apply(int(index), dict(entry.get("mig-devices") or {}))
            self.label("success")
        finally:
            self.done.set()

    def _apply(self, index: int, counts: dict[str, int]) -> None:
        current = self.static.layout(index)
        if Counter(p for p, _ in current) == Counter({p: n for p, n in counts.items() if n}):
            return  # mig-parted leaves a GPU that already matches alone
        packing = find_packing(self.static.model, counts)
        assert packing is not None
        ops = [Operation("destroy", p, s) for p, s in current] + [Operation("create", p, s) for p, s in packing]
        self.hands.queue(node_id=0, gpu_index=index, operations=ops, batch_key=f"{index}:{time.monotonic()}")
        assert self.hands.batches[next(reversed(self.hands.batches))].status == "done"


@pytest.fixture
def manager_settings(mig_manager_rights: None, settings: Any) -> str:  # noqa: F811
    settings.FATIA_MIG_MANAGER_NAMESPACE = MANAGER_NAMESPACE
    settings.FATIA_MIG_MANAGER_CONFIGMAP = f"mig-parted-{time.monotonic_ns()}"
    settings.FATIA_MIG_MANAGER_TIMEOUT_S = 60
    return str(settings.FATIA_MIG_MANAGER_CONFIGMAP)


def run_reconfiguration(reconfiguration_id: int, timeout: float = 90) -> MigReconfiguration:
    """What advance_reconfiguration_task does, with the pool's own applier (the MIG manager's)."""
    deadline = time.monotonic() + timeout
    while reconfigure.advance_reconfiguration(reconfiguration_id=reconfiguration_id) != reconfigure.Next.OVER:
        assert time.monotonic() < deadline, "the reconfiguration did not finish"
        time.sleep(0.1)
    return MigReconfiguration.objects.get(pk=reconfiguration_id)


def test_the_mig_manager_applies_the_nodes_layout_and_the_claim_pins_the_new_instance(
    static_world: StaticWorld,  # noqa: F811
    manager_settings: str,
    admin: client.ApiClient,
) -> None:
    # given: a static-manager pool whose GPUs hold no 1g.10gb, and the MIG manager on the node
    sw = static_world
    manager = NvmlMigManager(admin, sw.node, manager_settings)
    manager.start()
    allocation = request(sw.kw, "1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)
    assert Node.objects.get(name=sw.node.name).state == Node.State.RECONFIGURING

    # when
    done = run_reconfiguration(reconfiguration.pk)
    manager.join(timeout=5)

    # then: the manager got the whole node (GPU 1 unchanged, GPU 0 the plan's counts), the GPU holds those counts
    assert (done.status, done.error) == (RStatus.DONE, "")
    planned = Counter(p for p, _ in done.targets)
    by_gpu = {i: e["mig-devices"] for e in manager.applied for i in e["devices"]}
    assert by_gpu == {0: dict(planned), 1: {"7g.80gb": 1}}
    assert Counter(p for p, _ in sw.node.layout(0)) == planned
    assert sw.node.layout(1) == LAYOUTS[1]
    assert sw.node.restarts >= 1
    assert Node.objects.get(name=sw.node.name).state == Node.State.READY

    # when: provisioning resumes
    provisioned = services.provision_allocation(allocation_id=allocation.pk)
    assert provisioned.status == Status.PROVISIONING
    wait_for("the claim to be allocated", lambda: settled(allocation.pk))

    # then: the claim pins the uuid of the 1g.10gb the driver placed, and the scheduler allocated it
    [start] = [s for p, s in sw.node.layout(0) if p == "1g.10gb"]
    mig_uuid = sw.node.mig_uuid(0, start)
    active = Allocation.objects.get(pk=allocation.pk)
    assert active.status == Status.ACTIVE
    claim = claim_json(admin, sw.kw.namespace(sw.kw.world.tenant_a.slug), active.claim_name)
    selectors = [s["cel"]["expression"] for s in claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]]
    assert f"device.attributes['gpu.nvidia.com'].uuid == '{mig_uuid}'" in selectors
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"] == f"gpu-0-mig-1g10gb-19-{start}"


def test_the_mig_manager_may_take_longer_than_an_agent_step_within_its_own_bound(
    static_world: StaticWorld,  # noqa: F811
    manager_settings: str,
    admin: client.ApiClient,
    settings: Any,
) -> None:
    # given: a manager that stays pending past the orchestration's step limit, within its own
    sw = static_world
    settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S = 3
    manager = NvmlMigManager(admin, sw.node, manager_settings, slow_s=6)
    manager.start()
    allocation = request(sw.kw, "1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)
    # when
    done = run_reconfiguration(reconfiguration.pk)
    # then
    assert (done.status, done.error) == (RStatus.DONE, "")


def test_a_failed_mig_manager_ends_the_request_failed_with_its_reason_and_quota_returned(
    static_world: StaticWorld,  # noqa: F811
    manager_settings: str,
    admin: client.ApiClient,
) -> None:
    # given: the manager on the node fails the change, saying why
    sw = static_world
    manager = NvmlMigManager(admin, sw.node, manager_settings, fail_with="GPU 0 is in use by a process")
    manager.start()
    allocation = request(sw.kw, "1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)

    # when
    failed = run_reconfiguration(reconfiguration.pk)

    # then: FAILED with the manager's words, the GPUs untouched, the node ready again
    assert failed.status == RStatus.FAILED
    assert "GPU 0 is in use by a process" in failed.error
    assert [sw.node.layout(0), sw.node.layout(1)] == LAYOUTS
    assert Node.objects.get(name=sw.node.name).state == Node.State.READY
    gpu0 = Gpu.objects.get(node__name=sw.node.name, index=0)
    assert [(i["profile"], i["start"]) for i in gpu0.static_instances] == LAYOUTS[0]

    # when: provisioning resumes, the request fails and gives its quota back
    ended = services.provision_allocation(allocation_id=allocation.pk)
    assert ended.status == Status.FAILED
    assert "quota was given back" in ended.status_message
    assert not Allocation.objects.filter(pk=allocation.pk, status__in=Allocation.QUOTA_HOLDING).exists()
