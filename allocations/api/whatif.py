"""What-if for planners (issue 14): answers computed from a pool's real layouts; nothing is written.

GET /api/v1/pools/<id>/what-if/add-gpus/?count=N[&model=X][&gpus_per_node=8]
GET /api/v1/pools/<id>/what-if/quota/?tenant=T[&factor=2 | &compute=C&memory=M]
GET /api/v1/pools/<id>/what-if/mix/

Platform admins, and managers of a tenant with quota in the pool (403 for anyone else). The computation is in
allocations/planning/; docs/placement.md, "What-if".
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.models import NodePool
from allocations.planning import answers
from tenants.permissions import TokenScopeAllows


def _query(request: Request) -> dict[str, str]:
    """The query string as a plain dict: given a QueryDict, DRF reads an empty optional field (?gpus_per_node=)
    as left out and answers with the default, where the schema calls the query invalid (a 400)."""
    return request.query_params.dict()


class AddGpusQuerySerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField(min_value=1, max_value=answers.MAX_ADD_GPUS, help_text="GPUs to add.")
    model = serializers.CharField(
        required=False, allow_blank=True, max_length=100, help_text="A catalog GPU model (default: the pool's)."
    )
    gpus_per_node = serializers.IntegerField(
        required=False, min_value=1, max_value=answers.MAX_GPUS_PER_NODE, help_text="GPUs per new node (8)."
    )


class QuotaQuerySerializer(serializers.Serializer[Any]):
    tenant = serializers.CharField(max_length=100, help_text="A tenant you manage: its id or slug.")
    factor = serializers.FloatField(
        required=False, min_value=0.0, max_value=answers.MAX_FACTOR, help_text="Scale both limits (default 2)."
    )
    compute = serializers.IntegerField(
        required=False, min_value=0, max_value=answers.MAX_LIMIT, help_text="New compute-slice limit."
    )
    memory = serializers.IntegerField(
        required=False, min_value=0, max_value=answers.MAX_LIMIT, help_text="New memory-slot limit."
    )


class CapacitySerializer(serializers.Serializer[Any]):
    gpus = serializers.IntegerField()
    whole_gpus_free = serializers.IntegerField()
    compute_total = serializers.IntegerField()
    compute_held = serializers.IntegerField()
    compute_free = serializers.IntegerField()
    memory_total = serializers.IntegerField()
    memory_held = serializers.IntegerField()
    memory_free = serializers.IntegerField()
    fits = serializers.DictField(child=serializers.IntegerField(), help_text="Offered profile -> slices that fit now.")


class ServedSerializer(serializers.Serializer[Any]):
    requests = serializers.IntegerField()
    slices = serializers.IntegerField()
    served_requests = serializers.IntegerField()
    served_slices = serializers.IntegerField()


class AddGpusSerializer(serializers.Serializer[Any]):
    model = serializers.CharField()
    gpus_added = serializers.IntegerField()
    nodes_added = serializers.IntegerField()
    before = CapacitySerializer()
    after = CapacitySerializer()
    queued_before = ServedSerializer(help_text="The pool's queued requests, in admission order.")
    queued_after = ServedSerializer()
    refused_before = ServedSerializer(help_text="Requests of the last 7 days that never got a slice.")
    refused_after = ServedSerializer()


class LimitsSerializer(serializers.Serializer[Any]):
    compute = serializers.IntegerField()
    memory = serializers.IntegerField()


class ProfileRoomSerializer(serializers.Serializer[Any]):
    profile = serializers.CharField()
    fits_now = serializers.IntegerField()
    quota_before = serializers.IntegerField()
    quota_after = serializers.IntegerField()
    more_before = serializers.IntegerField()
    more_after = serializers.IntegerField()
    bound_before = serializers.CharField(help_text="What binds: quota, capacity or both.")
    bound_after = serializers.CharField(help_text="What binds under the new quota: quota, capacity or both.")


class QuotaAnswerSerializer(serializers.Serializer[Any]):
    tenant_id = serializers.IntegerField()
    tenant = serializers.CharField(help_text="The tenant's slug.")
    before = LimitsSerializer()
    after = LimitsSerializer()
    rooms = ProfileRoomSerializer(many=True)
    compute_free_in_pool = serializers.IntegerField()
    memory_free_in_pool = serializers.IntegerField()
    share_before = serializers.FloatField(allow_null=True, help_text="Decayed usage / compute quota; null: none.")
    share_after = serializers.FloatField(allow_null=True)
    queued = serializers.IntegerField()
    queued_admitted_before = serializers.IntegerField()
    queued_admitted_after = serializers.IntegerField()
    first_position_before = serializers.IntegerField(allow_null=True)
    first_position_after = serializers.IntegerField(allow_null=True)
    others_queued = serializers.IntegerField()
    others_admitted_before = serializers.IntegerField()
    others_admitted_after = serializers.IntegerField()
    pending = serializers.IntegerField()
    pending_within_quota_before = serializers.IntegerField()
    pending_within_quota_after = serializers.IntegerField()
    pending_placed_after = serializers.IntegerField()


class GpuMixSerializer(serializers.Serializer[Any]):
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Profile -> instances on each GPU.")
    gpus = serializers.IntegerField()


class MixSerializer(serializers.Serializer[Any]):
    model = serializers.CharField()
    gpus = serializers.IntegerField()
    weights = serializers.DictField(child=serializers.FloatField())
    demand = serializers.DictField(child=serializers.IntegerField())
    target = GpuMixSerializer(many=True)
    served = serializers.DictField(child=serializers.IntegerField())
    served_compute = serializers.IntegerField()
    demand_compute = serializers.IntegerField()
    optimal = serializers.BooleanField()
    current = GpuMixSerializer(many=True)
    gpus_on_target = serializers.IntegerField()
    gpus_without_moves = serializers.IntegerField()
    moves = serializers.IntegerField()
    creates = serializers.IntegerField()


class WhatIfViewSet(viewsets.GenericViewSet[NodePool]):
    """What-if answers for a pool: platform admins and managers of a tenant with quota there."""

    queryset = NodePool.objects.all()
    serializer_class = AddGpusSerializer
    permission_classes = [IsAuthenticated, TokenScopeAllows]

    def _pool(self) -> NodePool:
        # Who may ask first: a refusal does not depend on the input.
        return answers.plannable_pool(self.request.user, self.get_object())

    @extend_schema(parameters=[AddGpusQuerySerializer], responses={200: AddGpusSerializer})
    @action(detail=True, methods=["get"], url_path="what-if/add-gpus", url_name="add-gpus")
    def add_gpus(self, request: Request, pk: str | None = None) -> Response:
        """If the pool gets N more GPUs: capacity and the queued and refused demand served, before and after."""
        pool = self._pool()
        query = AddGpusQuerySerializer(data=_query(request))
        query.is_valid(raise_exception=True)
        v = query.validated_data
        found = answers.add_gpus(
            pool=pool, count=v["count"], model=v.get("model", ""), gpus_per_node=v.get("gpus_per_node")
        )
        return Response(AddGpusSerializer(answers.as_json(found)).data)

    @extend_schema(parameters=[QuotaQuerySerializer], responses={200: QuotaAnswerSerializer})
    @action(detail=True, methods=["get"], url_path="what-if/quota", url_name="quota")
    def quota(self, request: Request, pk: str | None = None) -> Response:
        """If a tenant's quota doubles (or is set to new limits): its room, its waiting requests, the others'."""
        pool = self._pool()
        query = QuotaQuerySerializer(data=_query(request))
        query.is_valid(raise_exception=True)
        v = query.validated_data
        tenant, found = answers.quota(
            user=request.user,
            pool=pool,
            tenant=v["tenant"],
            factor=v.get("factor"),
            compute=v.get("compute"),
            memory=v.get("memory"),
        )
        return Response(QuotaAnswerSerializer({**answers.as_json(found), "tenant": tenant.slug}).data)

    @extend_schema(responses={200: MixSerializer})
    @action(detail=True, methods=["get"], url_path="what-if/mix", url_name="mix")
    def mix(self, request: Request, pk: str | None = None) -> Response:
        """Which layout mix serves the pool's learnt demand best, and how far its layouts are from it."""
        pool = self._pool()
        return Response(MixSerializer(answers.as_json(answers.mix(pool=pool))).data)
