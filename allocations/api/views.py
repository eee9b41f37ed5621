"""REST endpoints for pools, quotas, quota changes, allocations and the audit log.

Reads are plain viewsets over `for_user()` querysets; each transition is one POST action that
validates a small input serializer and calls one service.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from allocations import selectors, services
from allocations.api import cohorts
from allocations.api import serializers as s
from allocations.api.filters import (
    AllocationFilter,
    AuditEventFilter,
    ExtensionConsentFilter,
    LeaseExtensionFilter,
    QuotaChangeFilter,
    QuotaFilter,
)
from allocations.cohorts.config import set_quota_cohort
from allocations.models import (
    Allocation,
    ExtensionConsent,
    LeaseExtension,
    NodePool,
    Quota,
    QuotaChangeRequest,
    SlicePlacement,
)
from allocations.placement import pool_capacity
from allocations.services import extension_consents, reclaim
from allocations.share_capacity import shared_capacity
from allocations.static_capacity import static_pool_fits
from tenants.api.auth import acting_user
from tenants.api.filters import MAX_ID
from tenants.api.pagination import WindowCountPagination
from tenants.errors import InvalidInput
from tenants.models import AuditEvent, Tenant
from tenants.permissions import IsPlatformAdminOrReadOnly, TokenScopeAllows

IDEMPOTENCY_HEADER = OpenApiParameter(
    name="Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=False,
    description="Repeat a create safely: the same key returns the first result (200) instead of a new one. "
    "1 to 128 printable ASCII characters.",
)


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    # Printable ASCII only: the key is stored and compared as text, and PostgreSQL refuses a NUL in it.
    if not 1 <= len(key) <= 128 or not all(" " <= ch <= "~" for ch in key):
        raise InvalidInput({"Idempotency-Key": ["Use 1 to 128 printable ASCII characters."]})
    return key


def created_or_replayed(data: Any, created: bool) -> Response:
    response = Response(data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
    if not created:
        response["Idempotent-Replayed"] = "true"
    return response


def visible_tenant(request: Request, tenant_id: int | str | None) -> Tenant:
    """The tenant named in a create, resolved within what the user can see (400 otherwise): by id, or (where a
    field takes either, TenantRefField) by slug."""
    tenants = Tenant.objects.for_user(request.user)
    if tenant_id is None:
        mine = list(tenants[:2])
        if len(mine) != 1:
            raise InvalidInput({"tenant": ["You belong to several tenants (or none): say which one."]})
        return mine[0]
    if isinstance(tenant_id, str):
        tenant = tenants.filter(slug=tenant_id).first()
        if tenant is None:
            why = f"No tenant with the id or slug {tenant_id!r}: give a tenant's id or its slug."
            raise InvalidInput({"tenant": [why]})
        return tenant
    tenant = tenants.filter(pk=min(tenant_id, MAX_ID)).first()
    if tenant is None:
        raise InvalidInput({"tenant": [f"Unknown tenant {tenant_id}."]})
    return tenant


def existing_pool(pool_id: int | str) -> NodePool:
    """The pool with this id, or (where a field takes either, PoolRefField) this slug; else a 400 on `pool`."""
    if isinstance(pool_id, int):
        pool = NodePool.objects.filter(pk=min(pool_id, MAX_ID)).first()
        if pool is None:
            raise InvalidInput({"pool": [f"Unknown pool {pool_id}."]})
        return pool
    pool = NodePool.objects.filter(slug=pool_id).first()
    if pool is None:
        raise InvalidInput({"pool": [f"No pool with the id or slug {pool_id!r}: give a pool's id or its slug."]})
    return pool


class PoolViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[NodePool],
):
    """Node pools: a GPU model and the MIG profiles offered on it. Platform admins create and edit them."""

    queryset = NodePool.objects.all()
    serializer_class = s.PoolSerializer
    permission_classes = [IsAuthenticated, TokenScopeAllows, IsPlatformAdminOrReadOnly]
    filterset_fields = ["gpu_model", "slug"]
    ordering_fields = ["name", "created_at"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    @extend_schema(request=s.PoolCreateSerializer, responses={201: s.PoolSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = s.PoolCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        pool = services.create_node_pool(actor=acting_user(request), **data.validated_data)
        return Response(s.PoolSerializer(pool).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: s.PoolCapacitySerializer})
    @action(detail=True, methods=["get"])
    def capacity(self, request: Request, pk: str | None = None) -> Response:
        """What fits now: for each offered profile, how many more slices the pool can place."""
        pool = self.get_object()
        if pool.is_shared:
            figures = {**shared_capacity(pool).as_dict(), "mig_mode": pool.mig_mode, "fits_after_reconfiguration": None}
            return Response(s.PoolCapacitySerializer(figures).data)
        static = static_pool_fits([pool]).get(pool.pk)
        figures = {
            "pool": pool.pk,
            "mig_mode": pool.mig_mode,
            "fits_now": pool_capacity(pool) if static is None else static.free,
            "fits_after_reconfiguration": None if static is None else static.after_reconfiguration,
        }
        return Response(s.PoolCapacitySerializer(figures).data)

    @extend_schema(request=s.PoolUpdateSerializer, responses={200: s.PoolSerializer})
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        pool = self.get_object()
        data = s.PoolUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        pool = services.update_node_pool(pool_id=pool.pk, actor=acting_user(request), **data.validated_data)
        return Response(s.PoolSerializer(pool).data)


class QuotaViewSet(viewsets.GenericViewSet[Quota]):
    """Quota balances per tenant and pool; platform admins set limits with POST (an upsert)."""

    serializer_class = s.BalanceSerializer  # type: ignore[assignment]  # serializes Balance rows, not Quota
    filterset_class = QuotaFilter
    ordering_fields = ["tenant", "pool", "updated_at"]

    def get_queryset(self) -> QuerySet[Quota]:
        return Quota.objects.for_user(self.request.user).select_related("tenant", "pool", "cohort")

    def list(self, request: Request) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = [selectors.balance_of(q) for q in (page if page is not None else queryset)]
        data = s.BalanceSerializer(rows, many=True).data  # type: ignore[arg-type]
        return self.get_paginated_response(data) if page is not None else Response(data)

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(s.BalanceSerializer(selectors.balance_of(self.get_object())).data)

    @extend_schema(request=s.QuotaSetSerializer, responses={200: s.BalanceSerializer})
    def create(self, request: Request) -> Response:
        data = s.QuotaSetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        tenant = visible_tenant(request, v["tenant"])
        pool = existing_pool(v["pool"])
        quota = services.set_tenant_quota(
            tenant_id=tenant.pk,
            pool_id=pool.pk,
            compute_slices_limit=v["compute_slices_limit"],
            memory_slices_limit=v["memory_slices_limit"],
            profile_caps=v["profile_caps"],
            actor=acting_user(request),
        )
        return Response(s.BalanceSerializer(selectors.balance_of(self.get_queryset().get(pk=quota.pk))).data)

    @extend_schema(request=s.QuotaCohortSerializer, responses={200: s.BalanceSerializer, 409: cohorts.IN_USE})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Platform admins: join or leave a cohort of the quota's pool, set the borrowing and lending limits (issue
        15). Fields left out keep their value; leaving the cohort (`"cohort": null`) clears the limits."""
        quota = self.get_object()
        data = s.QuotaCohortSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        set_quota_cohort(
            quota_id=quota.pk, actor=acting_user(request), **s.cohort_membership(quota, data.validated_data)
        )
        return Response(s.BalanceSerializer(selectors.balance_of(self.get_queryset().get(pk=quota.pk))).data)


class QuotaChangeViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[QuotaChangeRequest]):
    """Tenant managers ask for new limits; platform admins approve or reject."""

    serializer_class = s.QuotaChangeSerializer
    filterset_class = QuotaChangeFilter
    ordering_fields = ["created_at", "status"]

    def get_queryset(self) -> QuerySet[QuotaChangeRequest]:
        return QuotaChangeRequest.objects.for_user(self.request.user).select_related("requested_by", "decided_by")

    @extend_schema(
        request=s.QuotaChangeCreateSerializer, responses={201: s.QuotaChangeSerializer}, parameters=[IDEMPOTENCY_HEADER]
    )
    def create(self, request: Request) -> Response:
        data = s.QuotaChangeCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        tenant = visible_tenant(request, v["tenant"])
        pool = existing_pool(v["pool"])
        change, created = services.request_quota_change(
            tenant_id=tenant.pk,
            pool_id=pool.pk,
            compute_slices_limit=v["compute_slices_limit"],
            memory_slices_limit=v["memory_slices_limit"],
            profile_caps=v["profile_caps"],
            justification=v["justification"],
            actor=acting_user(request),
            idempotency_key=idempotency_key(request),
        )
        return created_or_replayed(s.QuotaChangeSerializer(change).data, created)

    @extend_schema(request=s.DecisionSerializer, responses={200: s.QuotaChangeSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        change = self.get_object()
        data = s.DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        change = services.approve_quota_change(change_id=change.pk, actor=acting_user(request), **data.validated_data)
        return Response(s.QuotaChangeSerializer(change).data)

    @extend_schema(request=s.RejectionSerializer, responses={200: s.QuotaChangeSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        change = self.get_object()
        data = s.RejectionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        change = services.reject_quota_change(change_id=change.pk, actor=acting_user(request), **data.validated_data)
        return Response(s.QuotaChangeSerializer(change).data)


class AllocationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Allocation]):
    """Slice requests: create, list, show (with placements and timeline), approve, reject, release, extend."""

    serializer_class = s.AllocationSerializer
    filterset_class = AllocationFilter
    pagination_class = WindowCountPagination
    ordering_fields = ["created_at", "status", "lease_expires_at"]

    def get_queryset(self) -> QuerySet[Allocation]:
        queryset = Allocation.objects.for_user(self.request.user).select_related("tenant", "pool", "requested_by")
        if self.action == "list":
            return queryset
        return queryset.prefetch_related(
            Prefetch("placements", queryset=SlicePlacement.objects.select_related("gpu__node"))
        )

    def get_serializer_class(self) -> type[serializers.BaseSerializer[Any]]:
        return s.AllocationSerializer if self.action == "list" else s.AllocationDetailSerializer

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # A page of plain dicts (values()), not model instances: see AllocationSerializer.
        rows = self.filter_queryset(self.get_queryset()).values(*s.ROW_COLUMNS)
        page = self.paginate_queryset(rows)
        return self.get_paginated_response([s.allocation_row(row) for row in page or []])

    def _detail(self, allocation: Allocation) -> Response:
        return Response(s.AllocationDetailSerializer(self.get_queryset().get(pk=allocation.pk)).data)

    @extend_schema(
        request=s.AllocationCreateSerializer,
        responses={201: s.AllocationDetailSerializer},
        parameters=[IDEMPOTENCY_HEADER],
    )
    def create(self, request: Request) -> Response:
        data = s.AllocationCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        tenant = visible_tenant(request, v.get("tenant"))
        pool = existing_pool(v["pool"])
        allocation, created = services.request_allocation(
            tenant_id=tenant.pk,
            pool_id=pool.pk,
            profile=v["profile"],
            count=v["count"],
            lease_hours=v["lease_hours"],
            purpose=v["purpose"],
            memory_mib=v["memory_mib"],
            thread_percentage=v["thread_percentage"],
            movable=v["movable"],
            namespace=v["namespace"] or None,
            actor=acting_user(request),
            idempotency_key=idempotency_key(request),
        )
        return created_or_replayed(
            s.AllocationDetailSerializer(self.get_queryset().get(pk=allocation.pk)).data, created
        )

    @extend_schema(request=s.DecisionSerializer, responses={200: s.AllocationDetailSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        allocation = self.get_object()
        data = s.DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._detail(
            services.approve_allocation(allocation_id=allocation.pk, actor=acting_user(request), **data.validated_data)
        )

    @extend_schema(request=s.RejectionSerializer, responses={200: s.AllocationDetailSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        allocation = self.get_object()
        data = s.RejectionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._detail(
            services.reject_allocation(allocation_id=allocation.pk, actor=acting_user(request), **data.validated_data)
        )

    @extend_schema(request=None, responses={200: s.AllocationDetailSerializer})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        allocation = self.get_object()
        return self._detail(services.release_allocation(allocation_id=allocation.pk, actor=acting_user(request)))

    @extend_schema(request=None, responses={200: s.AllocationDetailSerializer})
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """Platform admins: send the task of a request whose work is overdue (approved, provisioning or releasing
        for longer than FATIA_OUTBOX_RESEND_S) again; audited. 409 when it is not overdue."""
        allocation = self.get_object()
        return self._detail(services.retry_allocation_work(allocation_id=allocation.pk, actor=acting_user(request)))

    @extend_schema(request=None, responses={200: s.AllocationDetailSerializer})
    @action(detail=True, methods=["post"])
    def keep(self, request: Request, pk: str | None = None) -> Response:
        """Keep a request that idle reclaim flagged: the flag goes, and it is not flagged again for one idle time
        of its tenant. 409 when it is not flagged."""
        allocation = self.get_object()
        return self._detail(reclaim.keep_idle_allocation(allocation_id=allocation.pk, actor=acting_user(request)))

    @extend_schema(
        request=s.ExtendSerializer,
        responses={
            200: OpenApiResponse(
                s.AllocationDetailSerializer,
                description="Applied at once: the whole lease stays within the tenant's auto-approve lease, "
                "or a tenant manager asked. The body is the allocation with its longer lease.",
            ),
            202: OpenApiResponse(
                s.LeaseExtensionSerializer,
                description="Past the tenant's auto-approve lease: the extension waits for a tenant manager "
                "(GET /lease-extensions/{id}/ shows when it is decided); with ask_booking_owner, it may first wait "
                "for the owners of the bookings whose room it would use (`waiting_for_bookings`). The body is the "
                "pending extension.",
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str | None = None) -> Response:
        """Lengthen an active lease, under the same policy as a new request."""
        allocation = self.get_object()
        data = s.ExtendSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        extension = services.request_lease_extension(
            allocation_id=allocation.pk,
            actor=acting_user(request),
            hours=data.validated_data["hours"],
            ask_booking_owner=data.validated_data["ask_booking_owner"],
        )
        if extension.status == LeaseExtension.Status.PENDING:
            return Response(
                s.LeaseExtensionSerializer(self._extension(extension.pk)).data, status=status.HTTP_202_ACCEPTED
            )
        return self._detail(allocation)

    @staticmethod
    def _extension(pk: int) -> LeaseExtension:
        return (
            LeaseExtension.objects.select_related("requested_by", "decided_by").prefetch_related("consents").get(pk=pk)
        )


class LeaseExtensionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[LeaseExtension]):
    """Lease extensions of the user's tenants' allocations; tenant managers approve or reject pending ones."""

    serializer_class = s.LeaseExtensionSerializer
    filterset_class = LeaseExtensionFilter

    def get_queryset(self) -> QuerySet[LeaseExtension]:
        return (
            LeaseExtension.objects.for_user(self.request.user)
            .select_related("requested_by", "decided_by")
            .prefetch_related("consents")
        )

    @extend_schema(request=s.DecisionSerializer, responses={200: s.LeaseExtensionSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Add the hours to the lease now (tenant managers)."""
        extension = self.get_object()
        data = s.DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.approve_lease_extension(extension_id=extension.pk, actor=acting_user(request), **data.validated_data)
        return Response(s.LeaseExtensionSerializer(self.get_queryset().get(pk=extension.pk)).data)

    @extend_schema(request=s.RejectionSerializer, responses={200: s.LeaseExtensionSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Refuse the extension with a reason; the lease stays as it is (tenant managers)."""
        extension = self.get_object()
        data = s.RejectionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        services.reject_lease_extension(extension_id=extension.pk, actor=acting_user(request), **data.validated_data)
        return Response(s.LeaseExtensionSerializer(self.get_queryset().get(pk=extension.pk)).data)


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet[AuditEvent]):
    """The audit log, read-only: platform admins see everything, tenant managers their tenants'."""

    serializer_class = s.AuditEventSerializer
    filterset_class = AuditEventFilter
    ordering_fields = ["created_at"]

    def get_queryset(self) -> QuerySet[AuditEvent]:
        return AuditEvent.objects.for_user(self.request.user)


class ExtensionConsentViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[ExtensionConsent]
):
    """Longer leases that would use room a booking holds, asked of the booking's owner (issue 15): the booking's
    requester or its tenant's managers agree or refuse. Members of either tenant can read them."""

    serializer_class = s.ExtensionConsentSerializer
    filterset_class = ExtensionConsentFilter

    def get_queryset(self) -> QuerySet[ExtensionConsent]:
        return (
            ExtensionConsent.objects.for_user(self.request.user)
            .select_related("extension__requested_by", "decided_by")
            .order_by("-created_at", "-id")
        )

    @extend_schema(request=s.DecisionSerializer, responses={200: s.ExtensionConsentSerializer})
    @action(detail=True, methods=["post"])
    def agree(self, request: Request, pk: str | None = None) -> Response:
        """Let the lease run into the booking's window (the booking may find less room at its start)."""
        consent = self.get_object()
        data = s.DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        extension_consents.agree_to_extension(consent_id=consent.pk, actor=acting_user(request), **data.validated_data)
        return Response(s.ExtensionConsentSerializer(self.get_queryset().get(pk=consent.pk)).data)

    @extend_schema(request=s.RejectionSerializer, responses={200: s.ExtensionConsentSerializer})
    @action(detail=True, methods=["post"])
    def refuse(self, request: Request, pk: str | None = None) -> Response:
        """Keep the booking's room, with a reason: the extension is rejected."""
        consent = self.get_object()
        data = s.RejectionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        extension_consents.refuse_extension(consent_id=consent.pk, actor=acting_user(request), **data.validated_data)
        return Response(s.ExtensionConsentSerializer(self.get_queryset().get(pk=consent.pk)).data)
