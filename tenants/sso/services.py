"""Services of single sign-on: the admin's group -> tenant/role mappings, and signing in a user that an identity
provider (OpenID Connect, or an authenticating proxy) vouched for.

Every change is audited. Changes made at sign-in are recorded with the actor "sso".
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models.functions import Lower
from django.utils import timezone

from tenants.errors import InvalidInput
from tenants.models import Membership, SsoGroupMapping, SsoIdentity, Tenant
from tenants.services import _require_staff, record_audit_event

if TYPE_CHECKING:
    from django.contrib.auth.models import User

SSO_ACTOR = "sso"
# The issuer recorded for identities that the authenticating proxy vouched for (tenants/sso/proxy.py).
PROXY_ISSUER = "proxy"
ROLE_RANK: dict[str, int] = {Membership.Role.MEMBER.value: 1, Membership.Role.MANAGER.value: 2}


def _mapping_fields(mapping: SsoGroupMapping) -> dict[str, str]:
    return {"group": mapping.group, "tenant": mapping.tenant.slug, "role": mapping.role}


def _clean_group(group: str) -> str:
    cleaned = group.strip()
    if not cleaned:
        raise InvalidInput({"group": ["Name the group, as the identity provider sends it."]})
    if len(cleaned) > 255:
        raise InvalidInput({"group": ["A group name has at most 255 characters."]})
    if any(ord(ch) < 32 for ch in cleaned):
        raise InvalidInput({"group": ["A group name cannot contain control characters."]})
    return cleaned


def _clean_role(role: str) -> str:
    if role not in Membership.Role.values:
        raise InvalidInput({"role": [f"Choose one of: {', '.join(Membership.Role.values)}."]})
    return role


@transaction.atomic
def create_sso_group_mapping(*, group: str, tenant_id: int, role: str, actor: User) -> SsoGroupMapping:
    """Map an identity-provider group to a role in a tenant (platform admins only). Takes effect at each member's
    next sign-in. Raises NotAllowed, or InvalidInput naming the field."""
    _require_staff(actor)
    group = _clean_group(group)
    role = _clean_role(role)
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        raise InvalidInput({"tenant": [f"Unknown tenant {tenant_id}."]})
    try:
        with transaction.atomic():
            mapping = SsoGroupMapping.objects.create(group=group, tenant=tenant, role=role)
    except IntegrityError as exc:
        raise InvalidInput(
            {"group": [f"Group {group!r} already maps to {tenant.name}; change its role instead."]}
        ) from exc
    record_audit_event(actor=actor, verb="create", obj=mapping, tenant=tenant, after=_mapping_fields(mapping))
    return mapping


@transaction.atomic
def update_sso_group_mapping(*, mapping_id: int, role: str, actor: User) -> SsoGroupMapping:
    """Change the role a mapping gives (platform admins only). Locks the mapping row."""
    _require_staff(actor)
    role = _clean_role(role)
    mapping = SsoGroupMapping.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=mapping_id)
    before = _mapping_fields(mapping)
    if mapping.role != role:
        mapping.role = role
        mapping.save(update_fields=["role"])
        record_audit_event(
            actor=actor,
            verb="update",
            obj=mapping,
            tenant=mapping.tenant,
            before=before,
            after=_mapping_fields(mapping),
        )
    return mapping


@transaction.atomic
def delete_sso_group_mapping(*, mapping_id: int, actor: User) -> None:
    """Remove a mapping (platform admins only). Memberships it gave go at each member's next sign-in."""
    _require_staff(actor)
    mapping = SsoGroupMapping.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=mapping_id)
    record_audit_event(actor=actor, verb="delete", obj=mapping, tenant=mapping.tenant, before=_mapping_fields(mapping))
    mapping.delete()


# --- Sign-in ------------------------------------------------------------------------------------------------------


def _username_base(wanted: str) -> str:
    base = re.sub(r"[^\w.@+-]", "", wanted.strip().lower())[:140]
    return base or "user"


def _free_username(wanted: str) -> str:
    """`wanted`, or `wanted.sso`, `wanted.sso2`... : the first that no user has, compared without case, so that an
    SSO account never shares a name with a local one (a shared name would read as the same person in the UI)."""
    base = _username_base(wanted)
    candidates = [base, f"{base}.sso", *(f"{base}.sso{n}" for n in range(2, 50))]
    taken = set(
        get_user_model()
        .objects.annotate(lower=Lower("username"))
        .filter(lower__in=candidates)
        .values_list("lower", flat=True)
    )
    for candidate in candidates:
        if candidate not in taken:
            return candidate
    return f"{base}.sso-{secrets.token_hex(4)}"


def _identity_for(*, issuer: str, subject: str, username: str, email: str) -> tuple[SsoIdentity, bool]:
    """The identity row for (issuer, subject), locked, with a new user behind it on the first sign-in."""
    identity = (
        SsoIdentity.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
    ).first()
    if identity is not None:
        return identity, False
    user_model = get_user_model()
    for _ in range(3):
        try:
            with transaction.atomic():
                user = user_model.objects.create_user(username=_free_username(username), email=email)
                user.set_unusable_password()
                user.save(update_fields=["password"])
                return SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject), True
        except IntegrityError:
            # Another sign-in took the name, or created this same identity, at the same moment.
            identity = (
                SsoIdentity.objects.select_for_update(of=("self",))
                .select_related("user")
                .filter(issuer=issuer, subject=subject)
                .first()
            )
            if identity is not None:
                return identity, False
    raise InvalidInput({"username": ["Could not create an account for this sign-in; try again."]})


@transaction.atomic
def sign_in_sso_user(*, issuer: str, subject: str, username: str, email: str, groups: Iterable[str]) -> User:
    """The portal user for an account that the identity provider vouched for, made to match its groups.

    The user is found by (issuer, subject) only, never by e-mail or username: the first sign-in creates a new user
    (named after `username`, with a suffix when a local account has that name already) and no password. Then:
    - memberships SSO manages are made to match the tenants the groups map to (added, re-roled, removed);
      memberships added by hand are left as they are;
    - platform admin (is_staff) follows FATIA_OIDC_ADMIN_GROUPS, unless an admin made the user staff by hand.
    Locks the identity row, then the user's memberships. Audited with the actor "sso".
    """
    group_set = {g for g in groups if g}
    identity, created = _identity_for(issuer=issuer, subject=subject, username=username, email=email)
    user = identity.user
    if created:
        record_audit_event(
            actor=None,
            actor_name=SSO_ACTOR,
            verb="create_sso_user",
            obj=user,
            after={"user": user.get_username(), "issuer": issuer, "subject": subject[:150]},
        )
    if email and user.email != email:
        user.email = email
        user.save(update_fields=["email"])
    _sync_staff(identity, group_set)
    _sync_memberships(user, group_set)
    identity.last_login_at = timezone.now()
    identity.save(update_fields=["last_login_at", "staff_from_sso"])
    return user


def _sync_staff(identity: SsoIdentity, groups: set[str]) -> None:
    user = identity.user
    is_admin = bool(groups & set(settings.FATIA_OIDC_ADMIN_GROUPS))
    if is_admin and not user.is_staff:
        user.is_staff = True
        identity.staff_from_sso = True
        user.save(update_fields=["is_staff"])
        record_audit_event(
            actor=None, actor_name=SSO_ACTOR, verb="grant_admin", obj=user, after={"user": user.get_username()}
        )
    elif not is_admin and user.is_staff and identity.staff_from_sso:
        user.is_staff = False
        identity.staff_from_sso = False
        user.save(update_fields=["is_staff"])
        record_audit_event(
            actor=None, actor_name=SSO_ACTOR, verb="revoke_admin", obj=user, before={"user": user.get_username()}
        )


def desired_memberships(groups: Iterable[str]) -> dict[int, str]:
    """tenant id -> role that the groups give; the highest role wins when several groups map to one tenant."""
    desired: dict[int, str] = {}
    for tenant_id, role in SsoGroupMapping.objects.filter(group__in=list(groups)).values_list("tenant_id", "role"):
        if tenant_id not in desired or ROLE_RANK[role] > ROLE_RANK[desired[tenant_id]]:
            desired[tenant_id] = role
    return desired


def _sync_memberships(user: User, groups: set[str]) -> None:
    desired = desired_memberships(groups)
    username = user.get_username()
    current = {
        m.tenant_id: m
        for m in Membership.objects.select_for_update(of=("self",)).filter(user_id=user.pk).order_by("pk")
    }
    for tenant_id, membership in current.items():
        if not membership.sso_managed:
            continue
        if tenant_id not in desired:
            record_audit_event(
                actor=None,
                actor_name=SSO_ACTOR,
                verb="remove_member",
                obj=membership,
                tenant_id=tenant_id,
                before={"user": username, "role": membership.role, "via": "sso"},
            )
            membership.delete()
        elif membership.role != desired[tenant_id]:
            before = {"user": username, "role": membership.role, "via": "sso"}
            membership.role = desired[tenant_id]
            membership.save(update_fields=["role"])
            record_audit_event(
                actor=None,
                actor_name=SSO_ACTOR,
                verb="change_role",
                obj=membership,
                tenant_id=tenant_id,
                before=before,
                after={"user": username, "role": membership.role, "via": "sso"},
            )
    for tenant_id, role in sorted(desired.items()):
        if tenant_id in current:
            continue
        membership = Membership.objects.create(user=user, tenant_id=tenant_id, role=role, sso_managed=True)
        record_audit_event(
            actor=None,
            actor_name=SSO_ACTOR,
            verb="add_member",
            obj=membership,
            tenant_id=tenant_id,
            after={"user": username, "role": role, "via": "sso"},
        )
