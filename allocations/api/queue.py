"""The queue's API (issue 15): a pool's queue or mine with position and estimated start, and a request's priority.

GET /queue/?pool=<slug>&mine=true lists the queued requests the caller may see; POST /queue/{id}/priority/ sets
the order of a request inside its tenant (its managers). Reads go through queue_state, the write through one
service, as every other endpoint.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.admission.hold import is_held
from allocations.models import Allocation, NodePool
from allocations.queue_state import QueueEntry, queue_entry_of, visible_queue
from allocations.services.queue_priority import PRIORITY_MAX, PRIORITY_MIN, set_allocation_priority
from tenants.api.auth import acting_user
from tenants.errors import InvalidInput
from tenants.permissions import TokenScopeAllows


class QueueQuerySerializer(serializers.Serializer[Any]):
    pool = serializers.SlugField(required=False, help_text="Only this pool's queue (its slug).")
    mine = serializers.BooleanField(required=False, default=False, help_text="Only requests I made.")


class PrioritySerializer(serializers.Serializer[Any]):
    priority = serializers.IntegerField(min_value=PRIORITY_MIN, max_value=PRIORITY_MAX)


class QueueEntrySerializer(serializers.Serializer[Any]):
    allocation = serializers.IntegerField()
    pool = serializers.SlugField()
    tenant = serializers.SlugField()
    requested_by = serializers.CharField()
    profile = serializers.CharField()
    count = serializers.IntegerField()
    priority = serializers.IntegerField()
    queued_at = serializers.DateTimeField()
    position = serializers.IntegerField(help_text="1 = admitted next, counting every tenant's requests.")
    queue_length = serializers.IntegerField()
    estimated_start = serializers.DateTimeField(
        allow_null=True, help_text="When the leases that end before it free a layout that fits it; null: none does."
    )
    held = serializers.BooleanField(
        help_text="Waits because its pool's admission held it (issue 14): it fits, but every placement would strand "
        "room larger requests need, or (while the pool first fills) would open an empty GPU kept for whole-GPU "
        "requests. False: it waits for room."
    )
    held_until = serializers.DateTimeField(
        allow_null=True,
        help_text="Held to keep room for larger requests (issue 14); placed at the latest then. Null: not held.",
    )


def entry_row(entry: QueueEntry, length: int) -> dict[str, Any]:
    a = entry.allocation
    return {
        "allocation": a.pk,
        "pool": a.pool.slug,
        "tenant": a.tenant.slug,
        "requested_by": a.requested_by.get_username(),
        "profile": a.profile,
        "count": a.count,
        "priority": a.priority,
        "queued_at": a.queued_at,
        "position": entry.position,
        "queue_length": length,
        "estimated_start": entry.estimate.starts_at if entry.estimate else None,
        "held": is_held(a),
        "held_until": a.held_until if is_held(a) else None,
    }


class QueueViewSet(viewsets.GenericViewSet[Allocation]):
    """Queued requests: position and slot-aware estimated start; priority inside a tenant."""

    permission_classes = [IsAuthenticated, TokenScopeAllows]
    serializer_class = QueueEntrySerializer  # rows of QueueEntry, not Allocation
    pagination_class = None

    def get_queryset(self) -> Any:
        return Allocation.objects.for_user(self.request.user).select_related("tenant", "pool", "requested_by")

    @extend_schema(parameters=[QueueQuerySerializer], responses={200: QueueEntrySerializer(many=True)})
    def list(self, request: Request) -> Response:
        # A plain dict: given a QueryDict, DRF reads an empty optional field (?pool=) as left out, and the whole
        # queue answered a query the schema calls invalid (tests/test_api_fuzz.py found it).
        query = QueueQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        pool = None
        if slug := query.validated_data.get("pool"):
            pool = NodePool.objects.filter(slug=slug).first()
            if pool is None:
                raise InvalidInput({"pool": [f"No pool {slug!r}."]})
        rows = visible_queue(acting_user(request), pool=pool, mine=query.validated_data["mine"])
        return Response(QueueEntrySerializer([entry_row(e, n) for e, n in rows], many=True).data)

    @extend_schema(request=PrioritySerializer, responses={200: QueueEntrySerializer})
    @action(detail=True, methods=["post"])
    def priority(self, request: Request, pk: str | None = None) -> Response:
        """Tenant managers: the request's order inside its tenant's queue (higher first, -100 to 100). Allowed
        while it waits for approval or in the queue."""
        allocation = self.get_object()
        data = PrioritySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        updated = set_allocation_priority(
            allocation_id=allocation.pk, priority=data.validated_data["priority"], actor=acting_user(request)
        )
        found = queue_entry_of(updated)
        row = (
            entry_row(*found)
            if found
            else {**entry_row(QueueEntry(updated, 0, None), 0), "queued_at": updated.queued_at}
        )
        return Response(QueueEntrySerializer(row).data)
