"""The agent bootstraps its credential from the pod's ServiceAccount token against a live portal (Django's test
server), with the portal's Kubernetes adapter faked at its boundary (tests/nodeagent/test_bootstrap.py's cluster):
at start, again after the credential is revoked, with back-off while it is refused, and `python -m agent` itself.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.bootstrap import BootstrapTransport
from agent.config import ConfigError, load_config
from agent.nvml import Nvml
from agent.runner import Agent
from agent.sender import INVENTORY_PATH, Sender
from allocations.cluster import kube
from allocations.nodeagent import services
from allocations.nodeagent.models import AgentCredential, AgentStatus
from tests.agent.scenarios import fake, two_gpus, write
from tests.nodeagent.fake_cluster import NODE, FakeCluster, agent_identity, install_fake_cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(settings, monkeypatch) -> FakeCluster:
    return install_fake_cluster(settings, monkeypatch)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("projected.service-account.jwt\n", encoding="utf-8")
    return path


def _agent(url: str, token_file: Path, **sender_options: Any) -> tuple[Agent, Sender, BootstrapTransport]:
    clock = itertools.count(1000.0, 5.0)
    transport = BootstrapTransport(url, NODE, str(token_file), timeout_s=30)
    sender = Sender(transport=transport, node=NODE, boot="boot-1", jitter=lambda d: d, **sender_options)
    agent = Agent(nvml=Nvml(fake(two_gpus())), sender=sender, node=NODE, clock=lambda: next(clock))
    return agent, sender, transport


def _drain(sender: Sender, attempts: int = 10) -> list[str]:
    outcomes = []
    for _ in range(attempts):
        outcome = sender.send_pending()
        outcomes.append(outcome)
        if outcome == "idle":
            break
    return outcomes


def test_it_bootstraps_before_its_first_report_and_again_once_its_credential_is_revoked(
    world, live_server, cluster: FakeCluster, token_file: Path
):
    # given: an agent with no credential, only the pod's token
    agent, sender, transport = _agent(live_server.url, token_file)
    agent.tick()

    # when: it sends
    first = _drain(sender)

    # then: one bootstrap (the token file's contents went to the review), and the reports were accepted
    assert first[-1] == "idle" and "failed" not in first
    assert transport.bootstraps == 1
    assert cluster.reviewed == [("projected.service-account.jwt", "fatia-agent")]
    credential = AgentCredential.objects.get()
    assert services.hash_agent_token(transport.http.token) == credential.digest
    assert AgentStatus.objects.get(node__name=NODE).last_seq == 1

    # when: an admin revokes the credential, and the agent reports again
    services.revoke_agent_credential(credential_id=credential.pk, actor=world.root)
    agent.tick()
    second = _drain(sender)

    # then: the 401 made it bootstrap a new credential and resend; nothing was lost
    assert "failed" not in second
    assert transport.bootstraps == 2
    assert AgentCredential.objects.filter(revoked_at__isnull=True).count() == 1
    assert AgentStatus.objects.get(node__name=NODE).last_seq == 2
    # the credential lives in memory only: the token file is untouched
    assert token_file.read_text(encoding="utf-8") == "projected.service-account.jwt\n"


def test_while_the_portal_refuses_the_token_it_backs_off_and_keeps_its_samples(
    world, live_server, cluster: FakeCluster, token_file: Path
):
    # given: the cluster does not vouch for the token yet (say, its pod is not bound to the node yet)
    cluster.identity = kube.TokenIdentity(authenticated=False, error="pod not found")
    delays: list[float] = []

    def wait(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 3:
            cluster.identity = agent_identity()  # the fourth attempt is vouched for
        if AgentStatus.objects.filter(node__name=NODE, last_seq=3).exists():
            sender.stop()

    agent, sender, transport = _agent(live_server.url, token_file, backoff_base_s=1.0, backoff_cap_s=8.0, wait=wait)
    for _ in range(3):
        agent.tick()

    # when
    sender.send_interval_s = 0.01  # after a send that emptied the buffer it waits, which lets `wait` stop it
    sender.run()

    # then: three refusals backed off 1, 2, 4 s; then one bootstrap and every sample delivered
    assert delays[:3] == [1.0, 2.0, 4.0]
    assert transport.bootstraps == 1
    assert len(cluster.reviewed) == 4
    assert AgentStatus.objects.get(node__name=NODE).last_seq == 3
    assert sender.pending() == 0


def test_python_m_agent_bootstraps_and_reports_for_its_node(
    world, live_server, cluster: FakeCluster, tmp_path, token_file
):
    # given: the agent as the DaemonSet runs it: no credential, the projected token's path, the node's name
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "FATIA_AGENT_PORTAL_URL": live_server.url,
        "FATIA_AGENT_BOOTSTRAP_TOKEN_FILE": str(token_file),
        "NODE_NAME": NODE,
        "FATIA_AGENT_FAKE_NVML": str(write(tmp_path, two_gpus())),
        "FATIA_AGENT_INTERVAL_S": "0.2",
    }
    process = subprocess.Popen(  # noqa: S603 -- our own interpreter and module
        [sys.executable, "-m", "agent"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        # when: it has run long enough to send its inventory and a few samples
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not AgentStatus.objects.filter(node__name=NODE, last_seq__gte=3).exists():
            time.sleep(0.2)
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)

    # then: one bootstrapped credential for this node, and the reports arrived under it
    status = AgentStatus.objects.get(node__name=NODE)
    assert status.last_seq >= 3, output
    assert status.inventory["node"] == NODE
    (credential,) = AgentCredential.objects.all()
    assert (credential.node.name, credential.origin, credential.revoked_at) == (NODE, "bootstrap", None)
    assert credential.last_used_at is not None
    assert "bootstrapped this node's credential" in output
    assert process.returncode == 0, output


def test_without_a_credential_the_bootstrap_token_file_is_the_setting(token_file: Path):
    base = {"FATIA_AGENT_PORTAL_URL": "https://portal.example", "NODE_NAME": NODE}
    config = load_config({**base, "FATIA_AGENT_BOOTSTRAP_TOKEN_FILE": str(token_file)})
    assert (config.token, config.bootstrap_token_file, config.node) == ("", str(token_file), NODE)
    # a credential given as well wins: no bootstrap
    assert load_config({**base, "FATIA_AGENT_TOKEN": "fagent_a_b", "FATIA_AGENT_BOOTSTRAP_TOKEN_FILE": "x"}).token
    with pytest.raises(ConfigError, match="FATIA_AGENT_BOOTSTRAP_TOKEN_FILE: no token file at /nowhere/token"):
        load_config({**base, "FATIA_AGENT_BOOTSTRAP_TOKEN_FILE": "/nowhere/token"})


def test_a_token_file_that_disappears_is_a_transport_failure_not_a_crash(world, live_server, cluster, token_file):
    agent, sender, transport = _agent(live_server.url, token_file)
    agent.tick()
    token_file.unlink()
    assert sender.send_pending() == "failed"
    assert transport.bootstraps == 0
    assert cluster.reviewed == []
    assert INVENTORY_PATH  # the inventory still waits
    assert sender.pending() == 2
