"""The Kubernetes adapter faked at its boundary for the agent bootstrap's tests (kube.review_token and
kube.read_pod_placement): what the API server would answer about an agent pod's token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.cache import caches

from allocations.cluster import kube

SA = "fatia-system:fatia-agent"
NODE = "h100-node-0"
POD_UID = "6f1c1f3e-0d7a-4d1e-9a55-2b1e4f0c9d10"


@dataclass
class FakeCluster:
    """What the API server would answer: the review of any token, and the agent pod as it runs now."""

    identity: kube.TokenIdentity
    pod: kube.PodPlacement | None
    error: kube.KubeError | None = None
    reviewed: list[tuple[str, str]] = field(default_factory=list)

    def review_token(self, token: str, audience: str) -> kube.TokenIdentity:
        self.reviewed.append((token, audience))
        if self.error is not None:
            raise self.error
        return self.identity

    def read_pod_placement(self, namespace: str, name: str) -> kube.PodPlacement | None:
        if self.pod is None or (namespace, name) != (self.pod.namespace, self.pod.name):
            return None
        return self.pod


def agent_identity(
    *, node: str = NODE, user: str = f"system:serviceaccount:{SA}", **overrides: object
) -> kube.TokenIdentity:
    extra = {
        kube.EXTRA_POD_NAME: ("fatia-agent-x7k2p",),
        kube.EXTRA_POD_UID: (POD_UID,),
        kube.EXTRA_NODE_NAME: (node,),
    }
    values: dict[str, object] = {"authenticated": True, "username": user, "audiences": ("fatia-agent",), "extra": extra}
    values.update(overrides)
    return kube.TokenIdentity(**values)  # type: ignore[arg-type]


def install_fake_cluster(settings: Any, monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    """Bootstrap on (FATIA_AGENT_SERVICE_ACCOUNT), and the adapter answering as a cluster where the agent pod runs
    on NODE and its token is bound to it."""
    settings.FATIA_AGENT_SERVICE_ACCOUNT = SA
    settings.FATIA_AGENT_TOKEN_AUDIENCE = "fatia-agent"
    fake = FakeCluster(
        identity=agent_identity(),
        pod=kube.PodPlacement(namespace="fatia-system", name="fatia-agent-x7k2p", uid=POD_UID, node_name=NODE),
    )
    monkeypatch.setattr(kube, "review_token", fake.review_token)
    monkeypatch.setattr(kube, "read_pod_placement", fake.read_pod_placement)
    caches["default"].clear()  # the anonymous throttle's counters
    return fake
