"""Node agents bootstrap their own credential from the Kubernetes ServiceAccount token the kubelet gives their pod.

The agent sends its projected token (audience FATIA_AGENT_TOKEN_AUDIENCE); the portal asks the API server whose it
is (TokenReview) and accepts it only when it is the agents' ServiceAccount (FATIA_AGENT_SERVICE_ACCOUNT) and the
token is bound to a pod that still runs on the very node the agent asks a credential for. Node-bound tokens say
which node in the review's user.extra, so an agent can never obtain a credential for another node. Each bootstrap
revokes the node's previous bootstrapped credential (a restarted agent, a rotated token); admins' credentials are
left alone. The cluster calls happen before the transaction: no lock is held while the API server answers.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction

from allocations.cluster import kube
from allocations.models import Node
from allocations.nodeagent.models import AgentCredential
from allocations.nodeagent.services import WrongNode, hash_agent_token, mint_agent_token, revoke_agent_credential
from tenants.errors import DomainError, InvalidInput
from tenants.services import record_audit_event

logger = logging.getLogger(__name__)


class TokenRefused(DomainError):
    """The cluster does not vouch for this token as an agent pod's (401: the agent gets a fresh token and retries)."""

    status = 401
    code = "authentication_failed"


class ClusterUnavailable(DomainError):
    """The API server could not answer the review (503: retry later)."""

    status = 503
    code = "unavailable"


def agent_service_account_user() -> str:
    """The user name the API server gives the agents' ServiceAccount."""
    return f"system:serviceaccount:{settings.FATIA_AGENT_SERVICE_ACCOUNT}"


def bootstrap_agent_credential(*, node_name: str, token: str) -> tuple[AgentCredential, str]:
    """A credential for `node_name`, issued to the agent pod whose ServiceAccount token this is; returns it with the
    raw token (shown once). Raises TokenRefused (401), WrongNode (403: the token's pod is on another node),
    InvalidInput (400: no such node) or ClusterUnavailable (503). Audited as bootstrap_agent_credential."""
    placement = _verified_pod(node_name=node_name, token=token)
    return _rotate(node_name=node_name, placement=placement)


def _cluster(what: str, exc: kube.KubeError) -> ClusterUnavailable:
    # Rejected (a 403 for want of RBAC) or unreachable: the agent cannot fix either, so both say "later".
    logger.warning("agent bootstrap: %s failed: %s", what, exc)
    return ClusterUnavailable("The cluster could not check this token now; try again later.")


def _verified_pod(*, node_name: str, token: str) -> kube.PodPlacement:
    audience = settings.FATIA_AGENT_TOKEN_AUDIENCE
    try:
        identity = kube.review_token(token, audience)
    except kube.KubeError as exc:
        raise _cluster("the token review", exc) from exc
    if not identity.authenticated:
        raise TokenRefused("The cluster did not accept this token for the Fatia agent audience.", field="token")
    if identity.username != agent_service_account_user() or audience not in identity.audiences:
        raise TokenRefused("This token is not the node agents' ServiceAccount's.", field="token")
    pod_name = identity.extra_value(kube.EXTRA_POD_NAME)
    pod_uid = identity.extra_value(kube.EXTRA_POD_UID)
    token_node = identity.extra_value(kube.EXTRA_NODE_NAME)
    if not (pod_name and pod_uid and token_node):
        raise TokenRefused("This token is not bound to a pod on a node (mount a projected token).", field="token")
    if token_node != node_name:
        raise WrongNode(f"This token belongs to a pod on node {token_node}, not {node_name}.", field="node")
    namespace = settings.FATIA_AGENT_SERVICE_ACCOUNT.partition(":")[0]
    try:
        placement = kube.read_pod_placement(namespace, pod_name)
    except kube.KubeError as exc:
        raise _cluster("reading the agent's pod", exc) from exc
    if placement is None or placement.uid != pod_uid or placement.node_name != node_name:
        raise TokenRefused(f"The pod this token was issued to no longer runs on node {node_name}.", field="token")
    return placement


@transaction.atomic
def _rotate(*, node_name: str, placement: kube.PodPlacement) -> tuple[AgentCredential, str]:
    # The node row serialises two bootstraps of one node (the second sees and revokes the first's credential).
    node = Node.objects.select_for_update(no_key=True, of=("self",)).filter(name=node_name).first()
    if node is None:
        raise InvalidInput({"node": ["No node of that name."]})
    previous = AgentCredential.objects.filter(
        node=node, origin=AgentCredential.Origin.BOOTSTRAP, revoked_at__isnull=True
    ).order_by("pk")
    revoked = [revoke_agent_credential(credential_id=c.pk, actor=None).prefix for c in previous]
    prefix, raw = mint_agent_token()
    credential = AgentCredential.objects.create(
        node=node, prefix=prefix, digest=hash_agent_token(raw), origin=AgentCredential.Origin.BOOTSTRAP
    )
    record_audit_event(
        actor=None,
        actor_name=agent_service_account_user(),
        verb="bootstrap_agent_credential",
        obj=credential,
        before={"revoked": revoked},
        after={
            "node": node.name,
            "prefix": prefix,
            "pod": f"{placement.namespace}/{placement.name}",
            "pod_uid": placement.uid,
        },
    )
    return credential, raw
