from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from tenants.models import ApiToken, Membership, SsoGroupMapping, Tenant


class RefusesUnknownFields(serializers.Serializer[Any]):
    """An input serializer that names the fields it does not take. DRF drops them silently, so a PATCH of a field
    that cannot change there (or a misspelt one) answered 200 and changed nothing; now it is a 400 on that field."""

    unknown_field_message = "Not a field of this request."

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = self.initial_data
        # The browsable API's forms (DEBUG) post their CSRF token with the fields.
        unknown = sorted(set(given) - set(self.fields) - {"csrfmiddlewaretoken"}) if isinstance(given, Mapping) else []
        if unknown:
            raise serializers.ValidationError({name: [self.unknown_field_message] for name in unknown})
        return attrs


class TenantSerializer(serializers.ModelSerializer[Tenant]):
    class Meta:
        model = Tenant
        fields = [
            "id",
            "name",
            "slug",
            "max_lease_hours",
            "auto_approve_max_compute_slices",
            "auto_approve_max_lease_hours",
            "weakest_isolation",
            "avoid_co_tenants",
            "movable_by_default",
            "created_at",
        ]
        read_only_fields = fields


class TenantCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    slug = serializers.CharField(max_length=40)
    max_lease_hours = serializers.IntegerField(min_value=1, max_value=24 * 365, default=168)
    auto_approve_max_compute_slices = serializers.IntegerField(min_value=0, max_value=10_000, default=2)
    auto_approve_max_lease_hours = serializers.IntegerField(min_value=1, max_value=24 * 365, default=24)


class TenantUpdateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100, required=False)
    max_lease_hours = serializers.IntegerField(min_value=1, max_value=24 * 365, required=False)
    auto_approve_max_compute_slices = serializers.IntegerField(min_value=0, max_value=10_000, required=False)
    auto_approve_max_lease_hours = serializers.IntegerField(min_value=1, max_value=24 * 365, required=False)
    weakest_isolation = serializers.ChoiceField(
        choices=Tenant.Isolation.choices,
        required=False,
        help_text="The weakest GPU sharing the tenant accepts: mig, mps or shared (time-sliced).",
    )
    avoid_co_tenants = serializers.BooleanField(
        required=False, help_text="Never place the tenant's shares on a GPU another tenant shares."
    )
    movable_by_default = serializers.BooleanField(
        required=False, help_text="New requests may be moved by compaction (their pods restart) unless they say no."
    )


class IdleReclaimSerializer(serializers.Serializer[Any]):
    """A tenant's idle reclaim (docs/agent.md, "Idle reclaim")."""

    enabled = serializers.BooleanField(help_text="Off by default.")
    idle_after_minutes = serializers.IntegerField(
        min_value=15, max_value=7 * 24 * 60, help_text="Minutes without a process or memory in use: idle."
    )
    idle_grace_minutes = serializers.IntegerField(
        min_value=5, max_value=7 * 24 * 60, help_text="Minutes from the warning to the release."
    )

    @staticmethod
    def of(tenant: Tenant) -> dict[str, Any]:
        return {
            "enabled": tenant.idle_reclaim_enabled,
            "idle_after_minutes": tenant.idle_after_minutes,
            "idle_grace_minutes": tenant.idle_grace_minutes,
        }


class MembershipSerializer(serializers.ModelSerializer[Membership]):
    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "tenant", "username", "role", "created_at"]
        read_only_fields = fields


class MembershipCreateSerializer(serializers.Serializer[Any]):
    tenant = serializers.IntegerField(min_value=1)
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MembershipUpdateSerializer(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "scope", "created_at", "expires_at", "revoked_at", "last_used_at"]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    scope = serializers.ChoiceField(choices=ApiToken.Scope.choices)
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="When the token stops working; none: never. Made with an expiring token: at most (and by default)"
        " that token's expiry.",
    )


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class MeSerializer(serializers.Serializer[Any]):
    username = serializers.CharField()
    is_platform_admin = serializers.BooleanField()
    memberships = MembershipSerializer(many=True)


class SsoGroupMappingSerializer(serializers.ModelSerializer[SsoGroupMapping]):
    tenant_slug = serializers.CharField(source="tenant.slug", read_only=True)

    class Meta:
        model = SsoGroupMapping
        fields = ["id", "group", "tenant", "tenant_slug", "role", "created_at"]
        read_only_fields = fields


class SsoGroupMappingCreateSerializer(serializers.Serializer[Any]):
    group = serializers.CharField(max_length=255, help_text="As the identity provider sends it in the groups claim.")
    tenant = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class SsoGroupMappingUpdateSerializer(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=Membership.Role.choices)
