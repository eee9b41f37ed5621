"""Compaction for platform admins (issue 14): preview what a compaction of a pool would move, start one, follow it.

GET  /api/v1/move-plans/preview/?pool=<id>   the plan a compaction would start now (nothing written)
POST /api/v1/move-plans/  {"pool": <id>}      start it (201), or 400 with the reason in `pool`
GET  /api/v1/move-plans/[<id>/]              plans and their moves, newest first
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.models import MovePlan, NodePool, SliceMove
from allocations.services.compaction import preview_compaction, start_compaction
from tenants.api.auth import acting_user
from tenants.permissions import IsPlatformAdmin, TokenScopeAllows


class PoolChoiceSerializer(serializers.Serializer[Any]):
    pool = serializers.PrimaryKeyRelatedField(queryset=NodePool.objects.all())


class SliceMoveSerializer(serializers.ModelSerializer[SliceMove]):
    from_slot = serializers.SerializerMethodField()
    to_slot = serializers.SerializerMethodField()

    class Meta:
        model = SliceMove
        fields = ["position", "allocation", "profile", "from_slot", "to_slot", "step", "reason"]
        read_only_fields = fields

    def get_from_slot(self, move: SliceMove) -> str:
        return f"{move.from_gpu.node.name}/gpu-{move.from_gpu.index}:{move.from_start}"

    def get_to_slot(self, move: SliceMove) -> str:
        return f"{move.to_gpu.node.name}/gpu-{move.to_gpu.index}:{move.to_start}"


class MovePlanSerializer(serializers.ModelSerializer[MovePlan]):
    moves = SliceMoveSerializer(many=True, read_only=True)

    class Meta:
        model = MovePlan
        fields = [
            "id",
            "pool",
            "trigger",
            "status",
            "status_message",
            "for_allocation",
            "summary",
            "moves",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields


class PlannedMoveSerializer(serializers.Serializer[Any]):
    allocation_id = serializers.IntegerField()
    tenant = serializers.CharField()
    profile = serializers.CharField()
    from_slot = serializers.CharField(source="source", help_text="node/gpu-<index>:<start>")
    to_slot = serializers.CharField(source="destination")


class PreviewSerializer(serializers.Serializer[Any]):
    moves = PlannedMoveSerializer(many=True)
    whole_gpus_before = serializers.IntegerField()
    whole_gpus_after = serializers.IntegerField()
    gpus_freed = serializers.IntegerField()
    gain = serializers.DictField(child=serializers.IntegerField())
    refusal = serializers.CharField(help_text="Why the pool would not be compacted now; empty when it would.")


class MovePlanViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet[MovePlan]
):
    """Compaction plans: platform admins only."""

    queryset = MovePlan.objects.prefetch_related("moves__from_gpu__node", "moves__to_gpu__node").order_by("-pk")
    serializer_class = MovePlanSerializer
    permission_classes = [IsAuthenticated, TokenScopeAllows, IsPlatformAdmin]
    filterset_fields = ["pool", "status"]

    @extend_schema(request=PoolChoiceSerializer, responses={201: MovePlanSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = PoolChoiceSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        plan = start_compaction(pool_id=data.validated_data["pool"].pk, actor=acting_user(request))
        return Response(MovePlanSerializer(self.get_queryset().get(pk=plan.pk)).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("pool", int, required=True, description="the pool's id")],
        responses={200: PreviewSerializer},
    )
    @action(detail=False, methods=["get"])
    def preview(self, request: Request) -> Response:
        """What a compaction of the pool would move now: which request from which slot to which, what it frees."""
        data = PoolChoiceSerializer(data={"pool": request.query_params.get("pool")})
        data.is_valid(raise_exception=True)
        found = preview_compaction(pool=data.validated_data["pool"])
        return Response(
            PreviewSerializer(
                {
                    "moves": found.moves,
                    "whole_gpus_before": found.whole_gpus_before,
                    "whole_gpus_after": found.whole_gpus_after,
                    "gpus_freed": found.gpus_freed,
                    "gain": found.gain,
                    "refusal": found.refusal,
                }
            ).data
        )
