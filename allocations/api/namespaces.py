"""Namespaces tenants own (issue 17).

GET    /api/v1/namespaces/[?tenant=<id>]     each visible tenant's namespaces: the portal-made one (id null,
                                             origin "portal") first, then those it owns
POST   /api/v1/namespaces/  {tenant, name}   platform admins: give an existing namespace to a tenant (201)
DELETE /api/v1/namespaces/<id>/              platform admins: take it back (204; 409 while a request's claims live)
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from allocations.models import tenant_namespace
from allocations.services.tenant_namespaces import assign_namespace, remove_namespace
from tenants.api.auth import acting_user
from tenants.api.filters import id_query_param
from tenants.api.schema import ErrorSerializer
from tenants.models import Tenant, TenantNamespace
from tenants.permissions import IsPlatformAdmin, TokenScopeAllows


class NamespaceSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField(allow_null=True, help_text="null for the portal-made namespace")
    tenant = serializers.IntegerField()
    tenant_slug = serializers.CharField()
    name = serializers.CharField()
    origin = serializers.CharField(help_text="portal (made by the portal), assigned (by an admin) or labelled")


class AssignSerializer(serializers.Serializer[Any]):
    tenant = serializers.IntegerField(min_value=1, help_text="the tenant's id")
    name = serializers.CharField(max_length=63)


def _row(ns: TenantNamespace) -> dict[str, Any]:
    return {"id": ns.pk, "tenant": ns.tenant_id, "tenant_slug": ns.tenant.slug, "name": ns.name, "origin": ns.source}


class NamespaceViewSet(viewsets.GenericViewSet[TenantNamespace]):
    """Members see their tenants' namespaces; platform admins see and change every tenant's."""

    serializer_class = NamespaceSerializer
    permission_classes = [IsAuthenticated, TokenScopeAllows]
    pagination_class = None

    def get_permissions(self) -> list[Any]:
        if self.action in ("create", "destroy"):
            return [IsAuthenticated(), TokenScopeAllows(), IsPlatformAdmin()]
        return [IsAuthenticated(), TokenScopeAllows()]

    def get_queryset(self) -> Any:
        return TenantNamespace.objects.for_user(self.request.user).select_related("tenant")

    @extend_schema(
        parameters=[OpenApiParameter("tenant", int, required=False, description="only this tenant's")],
        responses={200: NamespaceSerializer(many=True)},
    )
    def list(self, request: Request) -> Response:
        tenants = Tenant.objects.for_user(request.user).order_by("slug")
        owned = self.get_queryset()
        wanted = id_query_param(request, "tenant", "tenant")
        if wanted is not None:
            tenants = tenants.filter(pk=wanted)
            owned = owned.filter(tenant_id=wanted)
        rows = [
            {"id": None, "tenant": t.pk, "tenant_slug": t.slug, "name": tenant_namespace(t), "origin": "portal"}
            for t in tenants
        ]
        rows += [_row(ns) for ns in owned.order_by("tenant__slug", "name")]
        return Response(NamespaceSerializer(rows, many=True).data)

    @extend_schema(request=AssignSerializer, responses={201: NamespaceSerializer})
    def create(self, request: Request) -> Response:
        data = AssignSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        # Through for_user like every tenant-owned read (tests/test_tenancy_chokepoints.py); only admins get here.
        tenant = Tenant.objects.for_user(request.user).filter(pk=data.validated_data["tenant"]).first()
        if tenant is None:
            raise serializers.ValidationError({"tenant": ["No such tenant."]})
        ns = assign_namespace(tenant_id=tenant.pk, name=data.validated_data["name"], actor=acting_user(request))
        return Response(NamespaceSerializer(_row(ns)).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        responses={
            204: None,
            409: OpenApiResponse(
                ErrorSerializer, description="namespace_in_use: a live request's claims are there; release it first."
            ),
        }
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        ns = self.get_object()
        remove_namespace(namespace_id=ns.pk, actor=acting_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
