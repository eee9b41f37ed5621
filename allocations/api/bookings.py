"""REST endpoints for bookings (issue 15): /api/v1/bookings/ create, list, show, and the approve, reject and
cancel transitions. Reads go through `Booking.objects.for_user`; each transition calls one service."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.api.serializers import DecisionSerializer, RejectionSerializer
from allocations.api.views import existing_pool, visible_tenant
from allocations.models import Booking
from allocations.services import bookings
from tenants.api.auth import acting_user
from tenants.api.filters import id_query_param


class BookingSerializer(serializers.ModelSerializer[Booking]):
    tenant_name = serializers.CharField(source="tenant.name", read_only=True)
    pool_slug = serializers.CharField(source="pool.slug", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, default=None)

    class Meta:
        model = Booking
        fields = [
            "id",
            "tenant",
            "tenant_name",
            "pool",
            "pool_slug",
            "profile",
            "count",
            "compute_slices",
            "memory_slices",
            "starts_at",
            "ends_at",
            "purpose",
            "status",
            "auto_approved",
            "status_message",
            "requested_by",
            "decided_by",
            "decided_at",
            "decision_reason",
            "allocation",
            "created_at",
        ]
        read_only_fields = fields


class BookingCreateSerializer(serializers.Serializer[Any]):
    tenant = serializers.IntegerField(min_value=1, required=False, default=None)
    pool = serializers.IntegerField(min_value=1)
    profile = serializers.CharField(max_length=32, help_text="The MIG profile of each slice (MIG pools only).")
    count = serializers.IntegerField(min_value=1, max_value=1000)
    starts_at = serializers.DateTimeField(help_text="When the slices are needed (ISO 8601, in the future).")
    ends_at = serializers.DateTimeField(help_text="When they are given back (after starts_at).")
    purpose = serializers.CharField(max_length=500)


class BookingCancelSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class BookingViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Booking]):
    """Bookings ahead of time: create, list (?pool=, ?status=), show, approve, reject (managers), cancel."""

    serializer_class = BookingSerializer

    def get_queryset(self) -> QuerySet[Booking]:
        rows = Booking.objects.for_user(self.request.user).select_related(
            "tenant", "pool", "requested_by", "decided_by"
        )
        # A filter the list cannot apply is a 400 naming it: ignoring it answered with every booking (`?pool=h100`,
        # a slug) or none (`fatia book list --status aproved`), and the caller could not tell.
        pool = id_query_param(self.request, "pool", "pool")
        wanted = self.request.query_params.get("status")
        if pool is not None:
            rows = rows.filter(pool_id=pool)
        if wanted is not None:
            if wanted not in Booking.Status.values:
                choices = ", ".join(Booking.Status.values)
                raise serializers.ValidationError({"status": [f"Unknown status {wanted!r}: choose one of {choices}."]})
            rows = rows.filter(status=wanted)
        return rows.order_by("starts_at", "pk")

    def _one(self, booking: Booking) -> Response:
        return Response(BookingSerializer(self.get_queryset().get(pk=booking.pk)).data)

    @extend_schema(request=BookingCreateSerializer, responses={201: BookingSerializer})
    def create(self, request: Request) -> Response:
        data = BookingCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        tenant = visible_tenant(request, v["tenant"])
        pool = existing_pool(v["pool"])
        booking = bookings.request_booking(
            tenant_id=tenant.pk,
            pool_id=pool.pk,
            profile=v["profile"],
            count=v["count"],
            starts_at=v["starts_at"],
            ends_at=v["ends_at"],
            purpose=v["purpose"],
            actor=acting_user(request),
        )
        return Response(BookingSerializer(self.get_queryset().get(pk=booking.pk)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DecisionSerializer, responses={200: BookingSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Approve a pending booking after checking quota and room over its window again (tenant managers)."""
        booking = self.get_object()
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._one(
            bookings.approve_booking(booking_id=booking.pk, actor=acting_user(request), **data.validated_data)
        )

    @extend_schema(request=RejectionSerializer, responses={200: BookingSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Refuse a pending booking with a reason (tenant managers)."""
        booking = self.get_object()
        data = RejectionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._one(
            bookings.reject_booking(booking_id=booking.pk, actor=acting_user(request), **data.validated_data)
        )

    @extend_schema(request=BookingCancelSerializer, responses={200: BookingSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Give up a pending or approved booking before it starts (its requester or a tenant manager)."""
        booking = self.get_object()
        data = BookingCancelSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._one(
            bookings.cancel_booking(booking_id=booking.pk, actor=acting_user(request), **data.validated_data)
        )
