"""Services that change tenants, memberships, API tokens, and the audit log writer.

Every state-changing function is `verb_noun`, keyword-only, atomic, and records an AuditEvent.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from tenants.errors import InvalidInput, NotAllowed
from tenants.models import ApiToken, AuditEvent, Membership, Tenant
from tenants.selectors import can_manage_tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.db.models import Model

TOKEN_PREFIX = "fatia"  # noqa: S105 (a public marker, not a secret)
SYSTEM_ACTOR = "system"


def validation_errors(exc: ValidationError) -> dict[str, list[str]]:
    """Turn a Django ValidationError into field -> messages (non-field errors under 'detail')."""
    if hasattr(exc, "error_dict"):
        return {
            ("detail" if field == "__all__" else field): [str(m) for e in errs for m in e.messages]
            for field, errs in exc.error_dict.items()
        }
    return {"detail": [str(m) for m in exc.messages]}


def full_clean_or_raise(obj: Model, **kwargs: Any) -> None:
    try:
        obj.full_clean(**kwargs)
    except ValidationError as exc:
        raise InvalidInput(validation_errors(exc)) from exc


def record_audit_event(
    *,
    actor: User | None,
    verb: str,
    obj: Model,
    tenant: Tenant | None = None,
    tenant_id: int | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    actor_name: str | None = None,
) -> AuditEvent:
    """Append one event to the audit log. Called inside the service's transaction, so the event
    and the change it describes commit or roll back together. `actor_name` names a non-person actor
    (e.g. "sso" for single sign-on) when `actor` is None."""
    return AuditEvent.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=actor.get_username() if actor is not None else (actor_name or SYSTEM_ACTOR),
        tenant_id=tenant.pk if tenant is not None else tenant_id,
        verb=verb,
        object_type=obj._meta.model_name or type(obj).__name__.lower(),
        object_id=str(obj.pk),
        before=before or {},
        after=after or {},
    )


def _require_staff(actor: User) -> None:
    if not getattr(actor, "is_staff", False):
        raise NotAllowed("Only platform admins can do this.")


def _tenant_fields(tenant: Tenant) -> dict[str, Any]:
    return {
        "name": tenant.name,
        "slug": tenant.slug,
        "max_lease_hours": tenant.max_lease_hours,
        "auto_approve_max_compute_slices": tenant.auto_approve_max_compute_slices,
        "auto_approve_max_lease_hours": tenant.auto_approve_max_lease_hours,
        "weakest_isolation": tenant.weakest_isolation,
        "avoid_co_tenants": tenant.avoid_co_tenants,
        "movable_by_default": tenant.movable_by_default,
    }


def credential_namespaces() -> set[str]:
    """Namespaces whose service accounts the portal, the node agent, NVIDIA's DRA kubelet plugin or its MIG manager
    run as. Members may create pods in their tenant's namespaces, and a pod may run as any service account of its
    namespace: no tenant may have one of these (an owned one: allocations/services/tenant_namespaces.py; the
    portal-made one, from the slug: create_tenant)."""
    accounts = (settings.FATIA_KUBE_PORTAL_SERVICE_ACCOUNT, settings.FATIA_AGENT_SERVICE_ACCOUNT)
    names = {account.partition(":")[0] for account in accounts if ":" in account}
    return (names | {settings.FATIA_DRA_PLUGIN_NAMESPACE, settings.FATIA_MIG_MANAGER_NAMESPACE}) - {""}


def holds_credentials(namespace: str) -> bool:
    """No tenant may own it: Kubernetes' own (kube-system holds the control plane's service accounts) or one that
    credential_namespaces names. Refused on assignment; the cluster check flags one assigned before."""
    return namespace.startswith("kube-") or namespace in credential_namespaces()


@transaction.atomic
def create_tenant(
    *,
    name: str,
    slug: str,
    actor: User,
    max_lease_hours: int = 168,
    auto_approve_max_compute_slices: int = 2,
    auto_approve_max_lease_hours: int = 24,
) -> Tenant:
    """Create a tenant (platform admins only). Raises NotAllowed or InvalidInput."""
    _require_staff(actor)
    made = f"{settings.FATIA_KUBE_NAMESPACE_PREFIX}{slug}"
    if made in credential_namespaces():
        raise InvalidInput(
            {"slug": [f"Its namespace would be {made}, where the portal's credentials are; choose another slug."]}
        )
    tenant = Tenant(
        name=name,
        slug=slug,
        max_lease_hours=max_lease_hours,
        auto_approve_max_compute_slices=auto_approve_max_compute_slices,
        auto_approve_max_lease_hours=auto_approve_max_lease_hours,
    )
    full_clean_or_raise(tenant)
    tenant.save()
    record_audit_event(actor=actor, verb="create", obj=tenant, tenant=tenant, after=_tenant_fields(tenant))
    return tenant


@transaction.atomic
def update_tenant_policy(
    *,
    tenant_id: int,
    actor: User,
    name: str | None = None,
    max_lease_hours: int | None = None,
    auto_approve_max_compute_slices: int | None = None,
    auto_approve_max_lease_hours: int | None = None,
    weakest_isolation: str | None = None,
    avoid_co_tenants: bool | None = None,
    movable_by_default: bool | None = None,
) -> Tenant:
    """Change a tenant's name or lease / auto-approve policy, or its GPU sharing policy: the weakest pool kind
    its members may request in and whether its shares avoid other tenants' GPUs, or whether its new requests are
    movable by compaction unless the requester says otherwise (platform admins only)."""
    _require_staff(actor)
    tenant = Tenant.objects.select_for_update(no_key=True, of=("self",)).get(pk=tenant_id)
    before = _tenant_fields(tenant)
    changes = {
        "name": name,
        "max_lease_hours": max_lease_hours,
        "auto_approve_max_compute_slices": auto_approve_max_compute_slices,
        "auto_approve_max_lease_hours": auto_approve_max_lease_hours,
        "weakest_isolation": weakest_isolation,
        "avoid_co_tenants": avoid_co_tenants,
        "movable_by_default": movable_by_default,
    }
    changed = [field for field, value in changes.items() if value is not None]
    for field in changed:
        setattr(tenant, field, changes[field])
    full_clean_or_raise(tenant)
    tenant.save(update_fields=[*changed, "updated_at"])
    record_audit_event(
        actor=actor, verb="update", obj=tenant, tenant=tenant, before=before, after=_tenant_fields(tenant)
    )
    return tenant


def _idle_reclaim_fields(tenant: Tenant) -> dict[str, Any]:
    return {
        "idle_reclaim_enabled": tenant.idle_reclaim_enabled,
        "idle_after_minutes": tenant.idle_after_minutes,
        "idle_grace_minutes": tenant.idle_grace_minutes,
    }


@transaction.atomic
def set_idle_reclaim(
    *, tenant_id: int, actor: User, enabled: bool, idle_after_minutes: int, idle_grace_minutes: int
) -> Tenant:
    """Set a tenant's idle reclaim: on or off, the idle time and the grace period after the warning.

    The tenant's managers and platform admins may. Locks the tenant row. Raises NotAllowed or InvalidInput
    (the model's bounds: idle time 15 min to a week, grace 5 min to a week). Turning it off clears every flag
    at the next sweep (allocations/services/reclaim.py); nothing already released comes back."""
    if not can_manage_tenant(actor, tenant_id):
        raise NotAllowed("Only the tenant's managers and platform admins can change idle reclaim.")
    tenant = Tenant.objects.select_for_update(no_key=True, of=("self",)).get(pk=tenant_id)
    before = _idle_reclaim_fields(tenant)
    tenant.idle_reclaim_enabled = enabled
    tenant.idle_after_minutes = idle_after_minutes
    tenant.idle_grace_minutes = idle_grace_minutes
    full_clean_or_raise(tenant)
    tenant.save(update_fields=[*before, "updated_at"])
    record_audit_event(
        actor=actor,
        verb="set_idle_reclaim",
        obj=tenant,
        tenant=tenant,
        before=before,
        after={"name": tenant.name, **_idle_reclaim_fields(tenant)},
    )
    return tenant


@transaction.atomic
def add_member(*, tenant_id: int, username: str, role: str, actor: User) -> Membership:
    """Add an existing user to a tenant with a role (platform admins only)."""
    _require_staff(actor)
    tenant = Tenant.objects.get(pk=tenant_id)
    if role not in Membership.Role.values:
        raise InvalidInput({"role": [f"Choose one of: {', '.join(Membership.Role.values)}."]})
    user_model = get_user_model()
    try:
        user = user_model.objects.get(username=username)
    except user_model.DoesNotExist as exc:
        raise InvalidInput({"username": [f"No user named {username!r}."]}) from exc
    try:
        with transaction.atomic():
            membership = Membership.objects.create(user=user, tenant=tenant, role=role)
    except IntegrityError as exc:
        raise InvalidInput({"username": ["This user is already a member of this tenant."]}) from exc
    record_audit_event(
        actor=actor, verb="add_member", obj=membership, tenant=tenant, after={"user": username, "role": role}
    )
    return membership


@transaction.atomic
def change_member_role(*, membership_id: int, role: str, actor: User) -> Membership:
    _require_staff(actor)
    if role not in Membership.Role.values:
        raise InvalidInput({"role": [f"Choose one of: {', '.join(Membership.Role.values)}."]})
    membership = Membership.objects.select_for_update(of=("self",)).select_related("user").get(pk=membership_id)
    before = {"user": membership.user.get_username(), "role": membership.role}
    membership.role = role
    membership.save(update_fields=["role"])
    record_audit_event(
        actor=actor,
        verb="change_role",
        obj=membership,
        tenant_id=membership.tenant_id,
        before=before,
        after={"user": membership.user.get_username(), "role": role},
    )
    return membership


@transaction.atomic
def remove_member(*, membership_id: int, actor: User) -> None:
    _require_staff(actor)
    membership = Membership.objects.select_for_update(of=("self",)).select_related("user").get(pk=membership_id)
    record_audit_event(
        actor=actor,
        verb="remove_member",
        obj=membership,
        tenant_id=membership.tenant_id,
        before={"user": membership.user.get_username(), "role": membership.role},
    )
    membership.delete()


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def create_api_token(
    *,
    user: User,
    name: str,
    scope: str,
    expires_at: datetime | None,
    actor: User,
    via_token: ApiToken | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for `user` and return it with its secret, which is never stored or shown again.

    `via_token` is the API token the request came with, if any: a token cannot mint a token with a wider scope or
    a longer life than its own (otherwise a leaked short-lived token buys a permanent one). Without an expiry, the
    new token expires with the one that made it.
    """
    if actor.pk != user.pk:
        raise NotAllowed("You can only create tokens for yourself.")
    errors: dict[str, list[str]] = {}
    if scope not in ApiToken.Scope.values:
        errors["scope"] = [f"Choose one of: {', '.join(ApiToken.Scope.values)}."]
    if via_token is not None:
        if scope == ApiToken.Scope.WRITE and via_token.scope != ApiToken.Scope.WRITE:
            errors["scope"] = ["A read-only token cannot create a token that writes."]
        if via_token.expires_at is not None:
            if expires_at is None:
                expires_at = via_token.expires_at
            elif expires_at > via_token.expires_at:
                errors["expires_at"] = [
                    "A token cannot create one that outlives it: choose an expiry no later than "
                    f"{via_token.expires_at:%Y-%m-%d %H:%M} UTC."
                ]
    if expires_at is not None and expires_at <= timezone.now():
        errors["expires_at"] = ["The expiry must be in the future."]
    if not name.strip():
        errors["name"] = ["Give the token a name."]
    if errors:
        raise InvalidInput(errors)
    prefix = secrets.token_hex(6)
    raw = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        user=user, name=name.strip(), prefix=prefix, digest=hash_token(raw), scope=scope, expires_at=expires_at
    )
    record_audit_event(
        actor=actor,
        verb="create_token",
        obj=token,
        after={
            "name": token.name,
            "prefix": prefix,
            "scope": scope,
            "expires_at": _iso(expires_at),
            "made_with_token": via_token.prefix if via_token is not None else None,
        },
    )
    return token, raw


@transaction.atomic
def revoke_api_token(*, token_id: int, actor: User) -> ApiToken:
    """Revoke one of the actor's own tokens; revoking twice is a no-op."""
    token = ApiToken.objects.select_for_update(no_key=True, of=("self",)).get(pk=token_id, user_id=actor.pk)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        record_audit_event(actor=actor, verb="revoke_token", obj=token, after={"prefix": token.prefix})
    return token


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@transaction.atomic
def record_login_lockout(*, kind: str, username: str, address: str, seconds: int) -> AuditEvent:
    """Audit that sign-in was locked for an account or an address after too many failures (tenants/throttling.py).

    No actor: nobody signed in. The subject is the username typed (it may name no user) or the address."""
    subject = username if kind == "account" else address
    return AuditEvent.objects.create(
        actor=None,
        actor_name=SYSTEM_ACTOR,
        tenant=None,
        verb="lock_out_login",
        object_type="login",
        object_id=f"{kind}:{subject}"[:64],
        after={"kind": kind, "username": username[:150], "address": address, "seconds": seconds},
    )
