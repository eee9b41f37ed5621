"""Static MIG, agent mode, end to end on the local control plane (issue 12): a request that needs a new layout ->
the GPU's node marked reconfiguring -> the plan applied to the (fake) GPUs -> the DRA plugin restarted and the
slices republished -> a claim pinned by the MIG device's `uuid` allocated by the real scheduler at the planned slot.

The main test runs the real node agent (agent.runner.Agent and its command poller, on the same fake NVML the
plugin publishes from) against the live portal over HTTP, with the pool's own applier (agent commands). The
other tests use tests/kube/static_fleet.StandInAgent, which injects faults the real agent cannot (an operation
NVML refuses on demand) and applies a batch the moment it is queued.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from agent.commands import CommandPoller
from agent.fake_nvml import FakeNvml
from agent.nvml import Nvml
from agent.runner import Agent
from agent.sender import HttpTransport, Sender
from allocations import services
from allocations.cluster import discovery, fake_fleet, fake_static, reconfigure
from allocations.cluster import sync as kube_sync
from allocations.mig.catalog import load_catalog
from allocations.mig.layout import geometry
from allocations.models import Allocation, Gpu, MigReconfiguration, Node, NodePool, Quota, SlicePlacement
from allocations.nodeagent import services as agent_services
from allocations.nodeagent.commands import batch_state
from tests.conftest import H100, World
from tests.kube.conftest import ControlPlane, KubeWorld, ready, wait_for
from tests.kube.static_fleet import PLUGIN_SELECTOR, FakePlugin, StandInAgent, StaticNode, plugin_pod, scenario
from tests.kube.test_provisioning import claim_json, request, settled

Status = Allocation.Status
RStatus = MigReconfiguration.Status
# GPU 0: two free 3g.40gb; GPU 1: one free 7g.80gb. No free 1g.10gb anywhere: a 1g.10gb needs a new layout.
LAYOUTS = [[("3g.40gb", 0), ("3g.40gb", 4)], [("7g.80gb", 0)]]


@dataclass
class StaticWorld:
    kw: KubeWorld
    node: StaticNode
    plugin: FakePlugin
    agent: StandInAgent


@pytest.fixture
def mig_mode() -> str:
    """The static pool's MIG mode (tests/kube/test_static_manager.py overrides it)."""
    return "static-agent"


@pytest.fixture
def static_world(
    mig_mode: str,
    world: World,
    control_plane: ControlPlane,
    admin: client.ApiClient,
    nvidia_device_classes: list[str],
    namespace: Callable[[str], str],
    settings: Any,
) -> Iterator[StaticWorld]:
    settings.FATIA_CLUSTER_BACKEND = "kubernetes"
    settings.FATIA_KUBECONFIG = str(control_plane.portal_kubeconfig)
    settings.FATIA_KUBE_NAMESPACE_PREFIX = f"t{uuid.uuid4().hex[:6]}-"
    settings.FATIA_DRA_PLUGIN_NAMESPACE = namespace("dra-driver")
    settings.FATIA_DRA_PLUGIN_SELECTOR = PLUGIN_SELECTOR
    settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S = 60
    model = load_catalog().model(H100)
    pool = services.create_node_pool(
        name="H100 static", slug="h100-static", gpu_model=H100, mig_mode=mig_mode, actor=world.root
    )
    name = f"static-node-{uuid.uuid4().hex[:8]}"
    labels = fake_fleet.gfd_labels(model, 2)
    uid = fake_fleet.create_ready_node(admin, name, labels)
    node = StaticNode(name, uid, model, FakeNvml(scenario(name, model, LAYOUTS)), settings.FATIA_DRA_PLUGIN_NAMESPACE)
    fake_static.republish_static(admin, model, name, uid, node.inventory())
    client.CoreV1Api(admin).create_namespaced_pod(node.plugin_namespace, body=plugin_pod(name))
    kube_sync.register_cluster_node(
        pool_id=pool.pk, name=name, gpu_uuids=[fake_fleet.gpu_uuid(name, i) for i in (0, 1)]
    )
    # What fleet discovery records from the node's slices: its GPUs' static MIG devices.
    discovery.sync_fleet(
        nodes=[discovery.DiscoveredNode(name=name, labels=labels, published=reconfigure.published_pool(name))]
    )
    for tenant in (world.tenant_a, world.tenant_b):
        services.set_tenant_quota(
            tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=14, memory_slices_limit=16, actor=world.root
        )
    kw = KubeWorld(world, pool, [], settings.FATIA_KUBE_NAMESPACE_PREFIX)
    for tenant in (world.tenant_a, world.tenant_b):
        kube_sync.onboard_tenant(tenant_id=tenant.pk)
        wait_for("the tenant namespace", partial(ready, admin, kw.namespace(tenant.slug)))
    plugin = FakePlugin(admin, node)
    plugin.start()
    try:
        yield StaticWorld(kw, node, plugin, StandInAgent(node))
    finally:
        plugin.stop()
    assert not plugin.errors


def run_reconfiguration(sw: StaticWorld, reconfiguration_id: int, timeout: float = 60) -> MigReconfiguration:
    """What advance_reconfiguration_task does, in this process, with the stand-in agent."""
    deadline = time.monotonic() + timeout
    while reconfigure.advance_reconfiguration(reconfiguration_id=reconfiguration_id, applier=sw.agent) != (
        reconfigure.Next.OVER
    ):
        assert time.monotonic() < deadline, "the reconfiguration did not finish"
        time.sleep(0.1)
    return MigReconfiguration.objects.get(pk=reconfiguration_id)


class RealAgent:
    """The node agent's own pieces for the static node, talking to the live portal; driven a step at a time."""

    def __init__(self, sw: StaticWorld, url: str, token: str) -> None:
        transport = HttpTransport(url, token, timeout_s=30)
        self.sender = Sender(transport=transport, node=sw.node.name, boot="boot-1", jitter=lambda d: d)
        self.agent = Agent(nvml=Nvml(sw.node.lib), sender=self.sender, node=sw.node.name)
        self.poller = CommandPoller(
            transport=transport, node=sw.node.name, outbox=self.sender.outbox, hand_over=self.agent.offer_commands
        )
        self.ran = 0

    def step(self) -> None:
        assert self.poller.poll_once() in ("handed", "idle")
        self.ran += self.agent.run_commands()
        while (outcome := self.sender.send_pending()) != "idle":
            assert outcome == "sent"


def run_with_real_agent(agent: RealAgent, reconfiguration_id: int, timeout: float = 60) -> MigReconfiguration:
    """advance_reconfiguration_task's steps with the pool's own applier, the agent polling between them."""
    deadline = time.monotonic() + timeout
    while reconfigure.advance_reconfiguration(reconfiguration_id=reconfiguration_id) != reconfigure.Next.OVER:
        assert time.monotonic() < deadline, "the reconfiguration did not finish"
        agent.step()
        time.sleep(0.1)
    return MigReconfiguration.objects.get(pk=reconfiguration_id)


def valid(sw: StaticWorld, gpu_index: int) -> bool:
    return not geometry(sw.node.model).violations(sw.node.layout(gpu_index))


@pytest.mark.django_db(transaction=True)
def test_a_request_needing_a_new_layout_gets_the_planned_instance_pinned_by_uuid(
    static_world: StaticWorld, admin: client.ApiClient, live_server: Any
) -> None:
    # given: static instances discovered from the slices, none of them a 1g.10gb
    sw = static_world
    gpu0 = Gpu.objects.get(node__name=sw.node.name, index=0)
    assert [(i["profile"], i["start"]) for i in gpu0.static_instances] == LAYOUTS[0]
    assert all(i["uuid"].startswith("MIG-") for i in gpu0.static_instances)
    allocation = request(sw.kw, "1g.10gb")

    # when: provisioning finds no free 1g.10gb
    waiting = services.provision_allocation(allocation_id=allocation.pk)

    # then: the request waits for a reconfiguration of the cheapest GPU, whose node is marked reconfiguring
    assert waiting.status == Status.APPROVED
    assert "Waiting for a MIG layout change" in waiting.status_message
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)
    assert reconfiguration.gpu == gpu0
    assert [op["action"] for op in reconfiguration.plan] == ["destroy", "create"]
    assert Node.objects.get(name=sw.node.name).state == Node.State.RECONFIGURING
    new = [(p, s) for p, s in reconfiguration.targets if p == "1g.10gb"]
    assert len(new) == 1
    planned_start = new[0][1]

    # when: the reconfiguration runs (the real agent applies the commands, plugin restarted, slices republished)
    node = Node.objects.get(name=sw.node.name)
    token = agent_services.issue_agent_credential(node_id=node.pk, actor=sw.kw.world.root)[1]
    agent = RealAgent(sw, live_server.url, token)
    done = run_with_real_agent(agent, reconfiguration.pk)

    # then: the agent ran the plan's commands, the GPUs hold the planned layout, the plugin was restarted
    assert (done.status, done.error) == (RStatus.DONE, "")
    assert agent.ran == len(reconfiguration.plan)
    assert batch_state(batch_key=f"reconfiguration:{done.pk}:apply-1").status == "done"
    assert sw.node.layout(0) == [(p, s) for p, s in done.targets]
    assert sw.node.restarts >= 1
    assert Node.objects.get(name=sw.node.name).state == Node.State.READY
    gpu0.refresh_from_db()
    recorded = {(i["profile"], i["start"]): i["uuid"] for i in gpu0.static_instances}
    mig_uuid = sw.node.mig_uuid(0, planned_start)
    assert recorded[("1g.10gb", planned_start)] == mig_uuid

    # when: provisioning resumes
    provisioned = services.provision_allocation(allocation_id=allocation.pk)
    assert provisioned.status == Status.PROVISIONING
    placement = SlicePlacement.objects.get(allocation=allocation)
    assert (placement.start, placement.mig_uuid) == (planned_start, mig_uuid)
    wait_for("the claim to be allocated", lambda: settled(allocation.pk))

    # then: the claim pins the uuid, and the real scheduler allocated exactly that device
    active = Allocation.objects.get(pk=allocation.pk)
    assert active.status == Status.ACTIVE
    claim = claim_json(admin, sw.kw.namespace(sw.kw.world.tenant_a.slug), active.claim_name)
    selectors = [s["cel"]["expression"] for s in claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]]
    assert f"device.attributes['gpu.nvidia.com'].uuid == '{mig_uuid}'" in selectors
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == (sw.node.name, f"gpu-0-mig-1g10gb-19-{planned_start}")


def test_a_free_precreated_instance_is_pinned_without_any_reconfiguration(
    static_world: StaticWorld, admin: client.ApiClient
) -> None:
    # given
    sw = static_world
    allocation = request(sw.kw, "3g.40gb")
    # when
    provisioned = services.provision_allocation(allocation_id=allocation.pk)
    wait_for("the claim to be allocated", lambda: settled(allocation.pk))
    # then: no layout change; the first free 3g.40gb of GPU 0 is taken
    assert provisioned.status == Status.PROVISIONING
    assert not MigReconfiguration.objects.exists()
    assert sw.node.restarts == 0
    placement = SlicePlacement.objects.get(allocation=allocation)
    assert (placement.gpu.index, placement.start, placement.mig_uuid) == (0, 0, sw.node.mig_uuid(0, 0))
    claim = claim_json(admin, sw.kw.namespace(sw.kw.world.tenant_a.slug), provisioned.claim_name)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0-mig-3g40gb-9-0"


def test_capacity_counts_the_published_free_instances_and_what_a_layout_change_makes_room_for(
    static_world: StaticWorld,
) -> None:
    # given: GPU 0 publishes two free 3g.40gb, GPU 1 one free 7g.80gb
    sw = static_world
    client = sw.kw.world.client(sw.kw.world.alice)
    url = f"/api/v1/pools/{sw.kw.pool.pk}/capacity/"
    # when
    before = client.get(url).json()
    # then: nothing but those is free now; a change of free space makes room for a whole H100's worth on each
    assert before["mig_mode"] == "static-agent"
    now, after = before["fits_now"], before["fits_after_reconfiguration"]
    assert (now["3g.40gb"], now["7g.80gb"], now["1g.10gb"]) == (2, 1, 0)
    assert (after["3g.40gb"], after["7g.80gb"], after["1g.10gb"]) == (4, 2, 14)

    # when: a 3g.40gb takes the free instance at slot 0 of GPU 0
    allocation = request(sw.kw, "3g.40gb")
    services.provision_allocation(allocation_id=allocation.pk)
    wait_for("the claim to be allocated", lambda: settled(allocation.pk))
    held = client.get(url).json()
    # then: one 3g.40gb left free; beside the held one a change fits 3 x 1g.10gb (starts 4, 5, 6), not a 7g.80gb
    now, after = held["fits_now"], held["fits_after_reconfiguration"]
    assert (now["3g.40gb"], now["7g.80gb"], now["1g.10gb"]) == (1, 1, 0)
    assert (after["3g.40gb"], after["7g.80gb"], after["1g.10gb"]) == (3, 1, 7 + 3)


def test_a_request_across_two_gpus_gets_one_reconfiguration_each_and_both_instances_pinned(
    static_world: StaticWorld, admin: client.ApiClient
) -> None:
    # given: two 4g.40gb (slot 0 only): one per GPU, each GPU needing a destroy and a create
    sw = static_world
    allocation = request(sw.kw, "4g.40gb", count=2)
    # when
    waiting = services.provision_allocation(allocation_id=allocation.pk)
    # then: one reconfiguration per GPU, in GPU order, the request waiting for both
    assert waiting.status == Status.APPROVED
    reconfigurations = list(MigReconfiguration.objects.filter(allocation=allocation).order_by("pk"))
    assert [r.gpu.index for r in reconfigurations] == [0, 1]
    assert all([op["action"] for op in r.plan] == ["destroy", "create"] for r in reconfigurations)

    # when: the first is applied and republished, then provisioning runs (its task would): still waiting
    first = run_reconfiguration(sw, reconfigurations[0].pk)
    assert first.status == RStatus.DONE
    assert services.provision_allocation(allocation_id=allocation.pk).status == Status.APPROVED
    assert Node.objects.get(name=sw.node.name).state == Node.State.RECONFIGURING
    # when: the second is over too
    second = run_reconfiguration(sw, reconfigurations[1].pk)
    assert second.status == RStatus.DONE
    provisioned = services.provision_allocation(allocation_id=allocation.pk)

    # then: both GPUs hold the planned layouts; the claim pins both new instances by uuid and the real scheduler
    # allocated exactly those devices; the quota holds exactly the request
    assert provisioned.status == Status.PROVISIONING
    assert [sw.node.layout(0), sw.node.layout(1)] == [[(p, s) for p, s in r.targets] for r in (first, second)]
    wait_for("the claim to be allocated", lambda: settled(allocation.pk))
    active = Allocation.objects.get(pk=allocation.pk)
    assert active.status == Status.ACTIVE
    placements = list(SlicePlacement.objects.filter(allocation=allocation).order_by("gpu__index"))
    assert [(p.gpu.index, p.start, p.mig_uuid) for p in placements] == [
        (0, 0, sw.node.mig_uuid(0, 0)),
        (1, 0, sw.node.mig_uuid(1, 0)),
    ]
    claim = claim_json(admin, sw.kw.namespace(sw.kw.world.tenant_a.slug), active.claim_name)
    pinned = [s["cel"]["expression"] for r in claim["spec"]["devices"]["requests"] for s in r["exactly"]["selectors"]]
    for placement in placements:
        assert f"device.attributes['gpu.nvidia.com'].uuid == '{placement.mig_uuid}'" in pinned
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == sorted(p.device_name for p in placements)
    quota = Quota.objects.get(tenant=sw.kw.world.tenant_a, pool=sw.kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (8, 8)


def test_a_request_across_two_gpus_whose_second_change_fails_gets_the_first_undone_and_its_quota_back(
    static_world: StaticWorld,
) -> None:
    # given: two 4g.40gb planned over both GPUs; NVML refuses to destroy GPU 1's 7g.80gb
    sw = static_world
    allocation = request(sw.kw, "4g.40gb", count=2)
    services.provision_allocation(allocation_id=allocation.pk)
    first, second = MigReconfiguration.objects.filter(allocation=allocation).order_by("pk")
    sw.agent.fail.add(("destroy", "7g.80gb", 0))
    # when: GPU 0 is changed, GPU 1's change fails (retried once), then provisioning looks again
    assert run_reconfiguration(sw, first.pk).status == RStatus.DONE
    assert sw.node.layout(0) == [("4g.40gb", 0), ("3g.40gb", 4)]
    assert run_reconfiguration(sw, second.pk).status == RStatus.FAILED
    ended = services.provision_allocation(allocation_id=allocation.pk)
    # then: the request failed with the reason and its quota back; GPU 0's change is undone by a reconfiguration
    # of the inverse plan, which takes it back to its first layout
    assert ended.status == Status.FAILED
    assert "being undone" in ended.status_message
    quota = Quota.objects.get(tenant=sw.kw.world.tenant_a, pool=sw.kw.pool)
    assert (quota.compute_slices_used, quota.memory_slices_used) == (0, 0)
    undo = MigReconfiguration.objects.get(allocation__isnull=True)
    assert undo.gpu_id == first.gpu_id
    assert run_reconfiguration(sw, undo.pk).status == RStatus.DONE
    assert [sw.node.layout(0), sw.node.layout(1)] == LAYOUTS
    assert valid(sw, 0) and valid(sw, 1)
    assert Node.objects.get(name=sw.node.name).state == Node.State.READY


def test_a_failure_mid_plan_is_retried_once_then_rolled_back_leaving_a_valid_layout(
    static_world: StaticWorld,
) -> None:
    # given: two 1g.10gb on one GPU need a destroy and two creates; the agent cannot make the second one
    sw = static_world
    allocation = request(sw.kw, "1g.10gb", count=2)
    services.provision_allocation(allocation_id=allocation.pk)
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)
    creates = [op for op in reconfiguration.plan if op["action"] == "create"]
    assert len(creates) == 2
    second = creates[1]
    sw.agent.fail.add(("create", second["profile"], second["start"]))

    # when
    failed = run_reconfiguration(sw, reconfiguration.pk)

    # then: tried twice, the first create rolled back, the layout valid, the plugin republished it
    assert failed.status == RStatus.FAILED
    assert failed.attempts == 2
    assert "failed twice" in failed.error
    assert [key.rsplit(":", 1)[1] for key, _ in sw.agent.queued] == ["apply-1", "apply-2", "rollback"]
    assert sw.agent.queued[1][1][0].start == second["start"]  # the retry: only what was not done
    destroyed = [(op["profile"], op["start"]) for op in reconfiguration.plan if op["action"] == "destroy"]
    assert sw.node.layout(0) == [x for x in LAYOUTS[0] if x not in destroyed]
    assert valid(sw, 0)
    assert Node.objects.get(name=sw.node.name).state == Node.State.READY
    gpu0 = Gpu.objects.get(node__name=sw.node.name, index=0)
    assert [(i["profile"], i["start"]) for i in gpu0.static_instances] == sw.node.layout(0)

    # when: provisioning resumes, the request is not planned into a second reconfiguration
    ended = services.provision_allocation(allocation_id=allocation.pk)
    assert ended.status == Status.FAILED
    assert "failed" in ended.status_message and "quota was given back" in ended.status_message


def test_a_worker_killed_after_queueing_resumes_without_applying_twice(static_world: StaticWorld) -> None:
    # given: the first step's batch was queued, then the worker died before recording it
    sw = static_world
    allocation = request(sw.kw, "1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)
    node = Node.objects.get(name=sw.node.name)
    plan = reconfigure.operations_of(reconfiguration.plan)
    sw.agent.queue(
        node_id=node.pk, gpu_index=0, operations=plan, batch_key=f"reconfiguration:{reconfiguration.pk}:apply-1"
    )
    # when: the task runs again from the start
    done = run_reconfiguration(sw, reconfiguration.pk)
    # then: one batch applied once, and the reconfiguration finished
    assert done.status == RStatus.DONE
    assert len(sw.agent.queued) == 1
    assert sw.node.layout(0) == [(p, s) for p, s in done.targets]
    # and running it again changes nothing
    assert reconfigure.advance_reconfiguration(reconfiguration_id=done.pk, applier=sw.agent) == reconfigure.Next.OVER


def test_a_plugin_that_never_republishes_fails_the_reconfiguration_with_a_clear_message(
    static_world: StaticWorld, admin: client.ApiClient, settings: Any
) -> None:
    # given: the plugin is gone (no pod, nothing restarts it)
    sw = static_world
    sw.plugin.stop()
    for pod in client.CoreV1Api(admin).list_namespaced_pod(sw.node.plugin_namespace).items:
        client.CoreV1Api(admin).delete_namespaced_pod(
            pod.metadata.name, sw.node.plugin_namespace, grace_period_seconds=0
        )
    settings.FATIA_RECONFIGURATION_STEP_TIMEOUT_S = 2
    allocation = request(sw.kw, "1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)
    # when
    failed = run_reconfiguration(sw, reconfiguration.pk)
    # then
    assert failed.status == RStatus.FAILED
    assert "did not publish the new layout within 2 s" in failed.error
    assert Node.objects.get(name=sw.node.name).state == Node.State.READY
    assert NodePool.objects.get(pk=sw.kw.pool.pk).mig_mode == "static-agent"


def test_a_plugin_restart_the_cluster_refuses_fails_the_reconfiguration_with_its_message(
    static_world: StaticWorld, settings: Any
) -> None:
    # given: a selector the API server refuses (a 400, not something to retry)
    sw = static_world
    settings.FATIA_DRA_PLUGIN_SELECTOR = "not a selector!"
    allocation = request(sw.kw, "1g.10gb")
    services.provision_allocation(allocation_id=allocation.pk)
    reconfiguration = MigReconfiguration.objects.get(allocation=allocation)
    # when
    failed = run_reconfiguration(sw, reconfiguration.pk)
    # then: failed with the API server's words, the node ready again, the GPUs as the agent left them (valid)
    assert failed.status == RStatus.FAILED
    assert failed.error.startswith("The cluster refused a step of the MIG layout change: ")
    assert Node.objects.get(name=sw.node.name).state == Node.State.READY
    assert valid(sw, 0)
