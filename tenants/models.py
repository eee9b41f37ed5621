"""Tenancy, roles, API tokens and the audit log.

Platform admins are Django staff users. Every other permission comes from a Membership.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


def member_tenant_ids(user: User) -> models.QuerySet[Any, Any]:
    """Subquery of the ids of the tenants the user belongs to. Filtering with `tenant_id__in=` on it
    (a semi-join) never duplicates rows, unlike a join through memberships, so no DISTINCT is needed."""
    return Membership.objects.filter(user_id=user.pk).values("tenant_id")


def managed_tenant_ids_subquery(user: User) -> models.QuerySet[Any, Any]:
    return Membership.objects.filter(user_id=user.pk, role=Membership.Role.MANAGER).values("tenant_id")


slug_validator = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$",
    "Use 1-40 lowercase letters, digits and hyphens, starting and ending with a letter or digit "
    "(it becomes part of Kubernetes names).",
)


class TenantQuerySet(models.QuerySet["Tenant"]):
    def for_user(self, user: User | AnonymousUser) -> TenantQuerySet:
        """Tenants the user may see: staff see all, others the tenants they belong to."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(pk__in=member_tenant_ids(user))


class Tenant(models.Model):
    """A team that holds quota and requests slices.

    Invariant: `auto_approve_max_lease_hours <= max_lease_hours` (checked in the schema).
    """

    name = models.CharField(max_length=100, unique=True)
    slug = models.CharField(max_length=40, unique=True, validators=[slug_validator])
    max_lease_hours = models.PositiveIntegerField(
        default=168, validators=[MinValueValidator(1), MaxValueValidator(24 * 365)]
    )
    auto_approve_max_compute_slices = models.PositiveIntegerField(
        default=2,
        help_text="Requests costing at most this many compute slices (in total) are approved at once "
        "when they fit the quota; 0 sends every request to a manager.",
    )
    auto_approve_max_lease_hours = models.PositiveIntegerField(default=24, validators=[MinValueValidator(1)])
    # Idle reclaim (issue 12, allocations/services/reclaim.py): off by default. The idle time is capped at a week
    # because the minute history it is judged from is kept a week (FATIA_AGENT_MINUTES_KEPT_DAYS).
    # Database defaults too: rows written by code that predates these fields (older migrations' states in tests, a
    # rolling deploy) still insert.
    idle_reclaim_enabled = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Release active requests whose every slice stayed idle (no process, no memory in use) "
        "for the idle time, after warning the owner.",
    )
    idle_after_minutes = models.PositiveIntegerField(
        default=120,
        db_default=120,
        validators=[MinValueValidator(15), MaxValueValidator(7 * 24 * 60)],
        help_text="Minutes without a process or memory in use after which a slice counts as idle (15 to 10080).",
    )
    idle_grace_minutes = models.PositiveIntegerField(
        default=60,
        db_default=60,
        validators=[MinValueValidator(5), MaxValueValidator(7 * 24 * 60)],
        help_text="Minutes between the warning and the release (5 to 10080).",
    )

    class Isolation(models.TextChoices):
        # The weakest pool kind (allocations.NodePool.Kind) the tenant's members may request in (issue 13).
        MIG = "mig", "MIG only (hardware isolation)"
        MPS = "mps", "MIG or MPS (memory limit, shared fault domain)"
        SHARED = "shared", "Any, time-sliced too (no isolation)"

    weakest_isolation = models.CharField(
        max_length=8,
        choices=Isolation.choices,
        default=Isolation.SHARED,
        db_default=Isolation.SHARED,
        help_text="The weakest GPU sharing the tenant accepts: requests to pools of a weaker kind are refused.",
    )
    # Anti-affinity on shared GPUs: the tenant's shares never land on a GPU that holds another tenant's share.
    avoid_co_tenants = models.BooleanField(
        default=False,
        db_default=False,
        help_text="On shared (time-sliced or MPS) GPUs, never place this tenant's shares next to another tenant's.",
    )
    # Compaction (issue 14): new requests of this tenant are movable unless the requester says otherwise.
    movable_by_default = models.BooleanField(
        default=False,
        db_default=False,
        help_text="New requests accept being moved to another slot to make room (their pods restart).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(auto_approve_max_lease_hours__lte=models.F("max_lease_hours")),
                name="tenant_auto_approve_lease_within_max",
                violation_error_message="The auto-approve lease bound cannot exceed the maximum lease.",
            ),
            models.CheckConstraint(
                condition=Q(max_lease_hours__gte=1),
                name="tenant_max_lease_positive",
                violation_error_message="The maximum lease must be at least one hour.",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class MembershipQuerySet(models.QuerySet["Membership"]):
    def for_user(self, user: User | AnonymousUser) -> MembershipQuerySet:
        """Memberships of the tenants the user belongs to (all for staff)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=member_tenant_ids(user))


class Membership(models.Model):
    """A user's role in one tenant. One membership per (user, tenant)."""

    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        MANAGER = "manager", "Manager"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    # Made by single sign-on from the user's groups (tenants/sso/services.py): kept in step with them at each
    # sign-in, and removed when no group maps to the tenant any more. Memberships added by hand are never touched.
    sso_managed = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__name", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "tenant"],
                name="membership_unique_user_tenant",
                violation_error_message="This user is already a member of this tenant.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class ApiToken(models.Model):
    """A per-user API token. Only a SHA-256 digest is stored; the secret is shown once.

    The token string is `fatia_<prefix>_<secret>`; `prefix` is indexed to find the row, the digest
    of the whole string is compared in constant time.
    """

    class Scope(models.TextChoices):
        READ = "read", "Read only"
        WRITE = "write", "Read and write"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.READ)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def for_user(self, user: User | AnonymousUser) -> AuditEventQuerySet:
        """Staff see every event; tenant managers see their tenants' events; members see none."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=managed_tenant_ids_subquery(user))


class AuditEvent(models.Model):
    """One state change: who did what to which object, with the state before and after.

    Append-only: written by services through `record_audit_event`, never updated or deleted by
    the UI or the API (the admin and API expose it read-only).
    """

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept as text so the log stays readable after a user is deleted, and for system actors.
    actor_name = models.CharField(max_length=150)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    verb = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="audit_object_idx")]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.verb} {self.object_type}:{self.object_id}"

    def describe(self) -> dict[str, Any]:
        return {"verb": self.verb, "before": self.before, "after": self.after}


class SsoGroupMapping(models.Model):
    """An identity-provider group that gives its members a role in a tenant at single sign-on.

    Set by platform admins. One row per (group, tenant); a user in several groups that map to one tenant gets the
    highest of their roles. Applied at each SSO sign-in (tenants/sso/services.py), not retroactively.
    """

    group = models.CharField(max_length=255)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sso_group_mappings")
    role = models.CharField(max_length=16, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "tenant__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["group", "tenant"],
                name="sso_group_mapping_unique_group_tenant",
                violation_error_message="This group already maps to this tenant.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.group} -> {self.tenant} ({self.role})"


class SsoIdentity(models.Model):
    """The link between a portal user and an account at an identity provider: (issuer, subject) -> user.

    Users who sign in by SSO are found by this link only, never by e-mail or username, so an account at the
    provider can never take over a local account that happens to share its name or address.
    `staff_from_sso` records that SSO made the user a platform admin (from FATIA_OIDC_ADMIN_GROUPS), so that SSO
    takes it away again when the group goes, but never touches an admin made by hand.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities")
    # The OpenID Connect issuer URL, or "proxy" for the authenticating proxy's user header.
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    staff_from_sso = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"],
                name="sso_identity_unique_issuer_subject",
                violation_error_message="This account at the identity provider is already linked to a user.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


# A Kubernetes namespace name (DNS-1123 label), as the API server checks it.
namespace_name_validator = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "A namespace name: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit.",
)


class TenantNamespaceQuerySet(models.QuerySet["TenantNamespace"]):
    def for_user(self, user: User | AnonymousUser) -> TenantNamespaceQuerySet:
        """Staff see every tenant's namespaces; everyone else only those of the tenants they belong to."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=member_tenant_ids(user))


class TenantNamespace(models.Model):
    """An existing namespace a tenant owns besides the portal-made one (tenants/namespaces.py; issue 17).

    Assigned by a platform admin, or found by the label `fatia.io/tenant=<slug>` an admin put on it (discovery).
    A namespace belongs to at most one tenant; the portal-made namespace is implied and never stored here."""

    class Source(models.TextChoices):
        ASSIGNED = "assigned", "assigned by an admin"
        LABELLED = "labelled", "found by its fatia.io/tenant label"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="namespaces")
    name = models.CharField(max_length=63, unique=True, validators=[namespace_name_validator])
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.ASSIGNED)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantNamespaceQuerySet.as_manager()

    class Meta:
        ordering = ["tenant_id", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.tenant})"
