"""Cohorts (issue 15): platform admins create, change and delete them; members read the cohorts of pools where their
tenants have quota (with only their own tenants' member rows: allocations/cohorts/overview.py).

GET    /api/v1/cohorts/[?pool=<id>]              cohorts with their members' figures
POST   /api/v1/cohorts/  {pool, name, reclaim_grace_minutes?}   (201)
GET    /api/v1/cohorts/<id>/
PATCH  /api/v1/cohorts/<id>/  {name?, reclaim_grace_minutes?}
DELETE /api/v1/cohorts/<id>/                     (204; 409 while a member holds borrowed slices)

Joining and leaving is on the quota: PATCH /api/v1/quotas/<id>/ {cohort, borrowing_compute_limit, ...}.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.cohorts.config import MAX_GRACE_MINUTES, create_cohort, delete_cohort, update_cohort
from allocations.cohorts.overview import CohortView, MemberRow, cohort_views, cohorts_for_user
from allocations.models import Cohort, NodePool
from tenants.api.auth import acting_user
from tenants.api.filters import id_query_param
from tenants.api.schema import ErrorSerializer
from tenants.api.serializers import RefusesUnknownFields
from tenants.permissions import IsPlatformAdminOrReadOnly, TokenScopeAllows

# A member holds borrowed slices (allocations/cohorts/config.py CohortInUse).
IN_USE = OpenApiResponse(
    ErrorSerializer, description="A member holds borrowed slices: release or wait for the reclaim."
)


class MemberSerializer(serializers.Serializer[MemberRow]):
    quota = serializers.IntegerField(source="quota_id")
    tenant = serializers.IntegerField(source="tenant_id")
    tenant_name = serializers.CharField()
    guarantee_compute = serializers.IntegerField(help_text="the quota's compute limit: its guarantee")
    guarantee_memory = serializers.IntegerField()
    used_compute = serializers.IntegerField(help_text="everything it holds, the borrowed part included")
    used_memory = serializers.IntegerField()
    borrowed_compute = serializers.IntegerField(help_text="held above its guarantee")
    borrowed_memory = serializers.IntegerField()
    lendable_compute = serializers.IntegerField(help_text="unused guarantee within its lending limit")
    lendable_memory = serializers.IntegerField()
    borrowing_compute_limit = serializers.IntegerField(allow_null=True)
    borrowing_memory_limit = serializers.IntegerField(allow_null=True)
    lending_compute_limit = serializers.IntegerField(allow_null=True)
    lending_memory_limit = serializers.IntegerField(allow_null=True)


class CohortSerializer(serializers.Serializer[CohortView]):
    id = serializers.IntegerField(source="cohort.pk")
    pool = serializers.IntegerField(source="cohort.pool_id")
    pool_slug = serializers.CharField(source="cohort.pool.slug")
    name = serializers.CharField(source="cohort.name")
    reclaim_grace_minutes = serializers.IntegerField(source="cohort.reclaim_grace_minutes")
    member_count = serializers.IntegerField()
    borrowed_compute = serializers.IntegerField(help_text="by all members: what the cohort has lent")
    borrowed_memory = serializers.IntegerField()
    members = MemberSerializer(many=True, help_text="every member for admins; your tenants' rows for others")
    overcommit_warning = serializers.CharField(
        help_text="non-empty when the members' guarantees may not fit the pool at once (issue 15)"
    )
    created_at = serializers.DateTimeField(source="cohort.created_at")
    updated_at = serializers.DateTimeField(source="cohort.updated_at")


GRACE_HELP = f"minutes of notice before borrowed slices are taken back, 0 to {MAX_GRACE_MINUTES} (default 30)"


class CohortCreateSerializer(serializers.Serializer[Any]):
    pool = serializers.IntegerField(min_value=1, help_text="the pool's id")
    name = serializers.CharField(max_length=100)
    reclaim_grace_minutes = serializers.IntegerField(
        min_value=0, max_value=MAX_GRACE_MINUTES, required=False, default=30, help_text=GRACE_HELP
    )


class CohortUpdateSerializer(RefusesUnknownFields):
    unknown_field_message = (
        "Not changed by PATCH, which renames a cohort or changes its grace; a cohort stays in its pool."
    )

    name = serializers.CharField(max_length=100, required=False)
    reclaim_grace_minutes = serializers.IntegerField(
        min_value=0, max_value=MAX_GRACE_MINUTES, required=False, help_text=GRACE_HELP
    )


class CohortViewSet(viewsets.GenericViewSet[Cohort]):
    """Cohorts per pool: admins write, members read those of their pools."""

    serializer_class = CohortSerializer  # type: ignore[assignment]  # serializes CohortView rows, not Cohort
    permission_classes = [IsAuthenticated, TokenScopeAllows, IsPlatformAdminOrReadOnly]
    pagination_class = None  # a handful per pool
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Cohort]:
        return cohorts_for_user(self.request.user)

    def _one(self, cohort: Cohort) -> dict[str, Any]:
        (view,) = cohort_views([cohort], self.request.user)
        return CohortSerializer(view).data

    @extend_schema(
        parameters=[OpenApiParameter("pool", int, required=False, description="only this pool's")],
        responses={200: CohortSerializer(many=True)},
    )
    def list(self, request: Request) -> Response:
        cohorts = self.get_queryset()
        wanted = id_query_param(request, "pool", "pool")
        if wanted is not None:
            # Pools are no secret (GET /pools/ lists them all): a mistyped id is said, not answered with no cohorts.
            if not NodePool.objects.filter(pk=wanted).exists():
                raise serializers.ValidationError({"pool": [f"No pool {request.query_params['pool']}."]})
            cohorts = cohorts.filter(pool_id=wanted)
        views = cohort_views(cohorts, request.user)
        return Response(CohortSerializer(views, many=True).data)  # type: ignore[arg-type]

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(self._one(self.get_object()))

    @extend_schema(request=CohortCreateSerializer, responses={201: CohortSerializer})
    def create(self, request: Request) -> Response:
        data = CohortCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        cohort = create_cohort(
            pool_id=v["pool"],
            name=v["name"],
            reclaim_grace_minutes=v["reclaim_grace_minutes"],
            actor=acting_user(request),
        )
        return Response(self._one(cohort), status=status.HTTP_201_CREATED)

    @extend_schema(request=CohortUpdateSerializer, responses={200: CohortSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        cohort = self.get_object()
        data = CohortUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        cohort = update_cohort(cohort_id=cohort.pk, actor=acting_user(request), **data.validated_data)
        return Response(self._one(cohort))

    @extend_schema(responses={204: None, 409: IN_USE})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        cohort = self.get_object()
        delete_cohort(cohort_id=cohort.pk, actor=acting_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
