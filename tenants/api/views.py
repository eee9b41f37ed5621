"""REST endpoints for tenants, memberships, API tokens and the current user."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import services
from tenants.api import serializers as s
from tenants.api.auth import acting_user
from tenants.api.filters import MembershipFilter
from tenants.errors import InvalidInput
from tenants.models import ApiToken, Membership, SsoGroupMapping, Tenant
from tenants.permissions import IsPlatformAdmin, TokenScopeAllows
from tenants.sso import services as sso_services


class TenantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Tenant]):
    """Tenants you belong to (all for platform admins). Platform admins create and edit them."""

    serializer_class = s.TenantSerializer
    filterset_fields = ["slug"]
    ordering_fields = ["name", "created_at"]

    def get_queryset(self) -> QuerySet[Tenant]:
        return Tenant.objects.for_user(self.request.user)

    @extend_schema(request=s.TenantCreateSerializer, responses={201: s.TenantSerializer})
    def create(self, request: Request) -> Response:
        data = s.TenantCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = services.create_tenant(actor=acting_user(request), **data.validated_data)
        return Response(s.TenantSerializer(tenant).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.TenantUpdateSerializer, responses={200: s.TenantSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        tenant = self.get_object()
        data = s.TenantUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = services.update_tenant_policy(tenant_id=tenant.pk, actor=acting_user(request), **data.validated_data)
        return Response(s.TenantSerializer(tenant).data)

    @extend_schema(methods=["GET"], request=None, responses={200: s.IdleReclaimSerializer})
    @extend_schema(methods=["PUT"], request=s.IdleReclaimSerializer, responses={200: s.IdleReclaimSerializer})
    @action(detail=True, methods=["get", "put"], url_path="idle-reclaim")
    def idle_reclaim(self, request: Request, pk: str | None = None) -> Response:
        """The tenant's idle reclaim; its managers and platform admins change it (every field is required)."""
        tenant = self.get_object()
        if request.method == "PUT":
            data = s.IdleReclaimSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            v = data.validated_data
            tenant = services.set_idle_reclaim(
                tenant_id=tenant.pk,
                actor=acting_user(request),
                enabled=v["enabled"],
                idle_after_minutes=v["idle_after_minutes"],
                idle_grace_minutes=v["idle_grace_minutes"],
            )
        return Response(s.IdleReclaimSerializer.of(tenant))


class MembershipViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Membership]):
    """Members of your tenants. Platform admins add, re-role and remove members."""

    serializer_class = s.MembershipSerializer
    filterset_class = MembershipFilter
    ordering_fields = ["created_at"]

    def get_queryset(self) -> QuerySet[Membership]:
        return Membership.objects.for_user(self.request.user).select_related("user")

    @extend_schema(request=s.MembershipCreateSerializer, responses={201: s.MembershipSerializer})
    def create(self, request: Request) -> Response:
        data = s.MembershipCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        if not Tenant.objects.for_user(request.user).filter(pk=v["tenant"]).exists():
            raise InvalidInput({"tenant": [f"Unknown tenant {v['tenant']}."]})
        membership = services.add_member(
            tenant_id=v["tenant"], username=v["username"], role=v["role"], actor=acting_user(request)
        )
        return Response(s.MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.MembershipUpdateSerializer, responses={200: s.MembershipSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        membership = self.get_object()
        data = s.MembershipUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = services.change_member_role(
            membership_id=membership.pk, role=data.validated_data["role"], actor=acting_user(request)
        )
        return Response(s.MembershipSerializer(membership).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        membership = self.get_object()
        services.remove_member(membership_id=membership.pk, actor=acting_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ApiTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[ApiToken]):
    """Your own API tokens. DELETE revokes (the row stays, so its use can still be traced)."""

    serializer_class = s.ApiTokenSerializer

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):  # schema generation runs without a user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user_id=acting_user(self.request).pk)

    @extend_schema(request=s.ApiTokenCreateSerializer, responses={201: s.ApiTokenCreatedSerializer})
    def create(self, request: Request) -> Response:
        data = s.ApiTokenCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        token, raw = services.create_api_token(
            user=acting_user(request),
            actor=acting_user(request),
            via_token=request.auth if isinstance(request.auth, ApiToken) else None,
            **data.validated_data,
        )
        body: dict[str, Any] = dict(s.ApiTokenSerializer(token).data)
        body["token"] = raw
        return Response(body, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        services.revoke_api_token(token_id=token.pk, actor=acting_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(APIView):
    """Who am I, and in which tenants with which role."""

    @extend_schema(responses={200: s.MeSerializer})
    def get(self, request: Request) -> Response:
        user = acting_user(request)
        memberships = Membership.objects.for_user(user).filter(user=user).select_related("user")
        return Response(
            s.MeSerializer(
                {
                    "username": acting_user(request).get_username(),
                    "is_platform_admin": acting_user(request).is_staff,
                    "memberships": memberships,
                }
            ).data
        )


class SsoGroupMappingViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[SsoGroupMapping]
):
    """Single sign-on: identity-provider groups that give a role in a tenant (platform admins only)."""

    serializer_class = s.SsoGroupMappingSerializer
    permission_classes = [IsAuthenticated, TokenScopeAllows, IsPlatformAdmin]
    filterset_fields = ["group", "tenant"]
    ordering_fields = ["group", "created_at"]

    def get_queryset(self) -> QuerySet[SsoGroupMapping]:
        return SsoGroupMapping.objects.select_related("tenant").order_by("group", "tenant__name", "pk")

    @extend_schema(request=s.SsoGroupMappingCreateSerializer, responses={201: s.SsoGroupMappingSerializer})
    def create(self, request: Request) -> Response:
        data = s.SsoGroupMappingCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        mapping = sso_services.create_sso_group_mapping(
            group=v["group"], tenant_id=v["tenant"], role=v["role"], actor=acting_user(request)
        )
        return Response(s.SsoGroupMappingSerializer(mapping).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.SsoGroupMappingUpdateSerializer, responses={200: s.SsoGroupMappingSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        mapping = self.get_object()
        data = s.SsoGroupMappingUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        mapping = sso_services.update_sso_group_mapping(
            mapping_id=mapping.pk, role=data.validated_data["role"], actor=acting_user(request)
        )
        return Response(s.SsoGroupMappingSerializer(mapping).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        mapping = self.get_object()
        sso_services.delete_sso_group_mapping(mapping_id=mapping.pk, actor=acting_user(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
