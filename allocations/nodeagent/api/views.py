"""Ingest endpoints for node agents, and the admin API for their credentials. Thin: validate, call one service."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import Http404, HttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from allocations.models import Node
from allocations.nodeagent import bootstrap, commands, services
from allocations.nodeagent.api import serializers as s
from allocations.nodeagent.api.fastcheck import compile_serializer
from allocations.nodeagent.api.telemetry import telemetry
from allocations.nodeagent.authentication import AgentCredentialAuthentication
from allocations.nodeagent.models import AgentCredential
from tenants.api.schema import ErrorSerializer

_validate_inventory = compile_serializer(s.InventoryIn)


class IsAgent(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, AgentCredential)


class _AgentView(APIView):
    authentication_classes = [AgentCredentialAuthentication]
    permission_classes = [IsAgent]
    throttle_classes: list[Any] = []  # one agent per node at a known rate; a credential is the bound

    def _validated(self, request: Request, validate: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        # Bodies over DATA_UPLOAD_MAX_MEMORY_SIZE are refused before this (400, "too_large"); the agent batches
        # below it. The serializers are checked by a compiled validator: same rules and messages, 30x faster.
        return validate(request.data)

    def _credential(self, request: Request) -> AgentCredential:
        credential = request.auth
        assert isinstance(credential, AgentCredential)  # noqa: S101 -- IsAgent guarantees it
        services.touch_agent_credential(credential=credential, now=timezone.now())
        return credential


class InventoryView(_AgentView):
    """A node's agent reports its GPUs, MIG profiles with their placements, and its GPU/compute instances."""

    @extend_schema(request=s.InventoryIn, responses={200: s.IngestOut}, operation_id="agent_inventory")
    def post(self, request: Request) -> Response:
        data = self._validated(request, _validate_inventory)
        services.record_inventory(credential=self._credential(request), payload=data)
        return Response({"accepted": 1, "duplicates": 0}, status=status.HTTP_200_OK)


class TelemetryView(_AgentView):
    """A node's agent reports a batch of telemetry samples (resending one is harmless). Answered 202 when the
    portal queues reports (then 503 with Retry-After while it is behind), 200 when it applies them at once;
    ``commands`` non-zero means MIG commands wait for this node. Served by the plain view in ``telemetry.py``
    (the hot path); this class carries its schema and answers the same."""

    @extend_schema(
        request=s.TelemetryIn,
        responses={200: s.TelemetryOut, 202: s.TelemetryQueuedOut, 503: ErrorSerializer},
        operation_id="agent_telemetry",
    )
    def post(self, request: Request) -> HttpResponse:
        return telemetry(request._request)


class BootstrapView(APIView):
    """An agent pod trades its projected ServiceAccount token for its node's credential (TokenReview).
    No credential yet, so no authentication: the anonymous rate throttles it per address."""

    authentication_classes: list[Any] = []
    permission_classes = [permissions.AllowAny]

    @extend_schema(
        request=s.BootstrapIn,
        responses={
            201: s.BootstrapOut,
            404: OpenApiResponse(ErrorSerializer, description="Bootstrap is off (FATIA_AGENT_SERVICE_ACCOUNT unset)."),
        },
        operation_id="agent_bootstrap",
    )
    def post(self, request: Request) -> Response:
        if not settings.FATIA_AGENT_SERVICE_ACCOUNT:
            raise Http404
        given = s.BootstrapIn(data=request.data)
        given.is_valid(raise_exception=True)
        credential, token = bootstrap.bootstrap_agent_credential(
            node_name=given.validated_data["node"], token=given.validated_data["token"]
        )
        return Response(
            s.BootstrapOut({"node": credential.node, "prefix": credential.prefix, "token": token}).data,
            status=status.HTTP_201_CREATED,
        )


class CommandListView(_AgentView):
    """The MIG operations waiting for this node's agent, in the order to run them. Listing hands them out: they
    become running, and a cancel no longer takes them back."""

    @extend_schema(
        parameters=[OpenApiParameter("node", str, required=True, description="This agent's node.")],
        responses={200: s.CommandsOut},
        operation_id="agent_commands",
    )
    def get(self, request: Request) -> Response:
        query = s.CommandsQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        listed = commands.claim_agent_commands(
            credential=self._credential(request), node_name=query.validated_data["node"]
        )
        return Response({"commands": s.CommandOut(listed, many=True).data})


class CommandResultView(_AgentView):
    """The outcome of one command, as the agent saw it. Sending the same result again is harmless."""

    @extend_schema(request=s.CommandResultIn, responses={200: s.CommandStateOut}, operation_id="agent_command_result")
    def post(self, request: Request, pk: int) -> Response:
        given = s.CommandResultIn(data=request.data)
        given.is_valid(raise_exception=True)
        command = commands.record_agent_command_result(
            credential=self._credential(request), command_id=pk, payload=given.validated_data
        )
        return Response(s.CommandStateOut(command).data)


class AgentCredentialViewSet(mixins.ListModelMixin, viewsets.GenericViewSet[AgentCredential]):
    """Platform admins issue, list and revoke node agent credentials. The token is in the create answer only."""

    permission_classes = [permissions.IsAdminUser]
    serializer_class = s.AgentCredentialOut

    def get_queryset(self) -> QuerySet[AgentCredential]:
        return AgentCredential.objects.select_related("node").order_by("node__name", "-created_at")

    @extend_schema(request=s.AgentCredentialIn, responses={201: s.AgentCredentialCreated})
    def create(self, request: Request) -> Response:
        given = s.AgentCredentialIn(data=request.data)
        given.is_valid(raise_exception=True)
        node = Node.objects.filter(name=given.validated_data["node"]).first()
        if node is None:
            raise serializers.ValidationError({"node": ["No node of that name."]})
        credential, token = services.issue_agent_credential(node_id=node.pk, actor=request.user)  # type: ignore[arg-type]
        body = s.AgentCredentialOut(credential).data | {"token": token}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: s.AgentCredentialOut})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        credential = self.get_object()
        credential = services.revoke_agent_credential(credential_id=credential.pk, actor=request.user)  # type: ignore[arg-type]
        return Response(s.AgentCredentialOut(credential).data)
