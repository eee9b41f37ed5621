"""Browser pages for API tokens and the platform admin's tenant, member and audit-log pages.

Each view parses a form, calls one service and turns a DomainError into a field error, a message
or a status: NotAllowed is 403, a missing object (or another user's) is 404.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, wraps
from pathlib import Path
from typing import Concatenate, ParamSpec

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import cache_control, never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from tenants import selectors as tenant_selectors
from tenants import services
from tenants.errors import NotAllowed
from tenants.forms import (
    ApiTokenForm,
    AuditFilterForm,
    MemberAddForm,
    MemberRoleForm,
    TenantCreateForm,
    TenantPolicyForm,
    form_status,
)
from tenants.models import ApiToken, Membership, Tenant
from tenants.service_calls import run_action, submit_form

P = ParamSpec("P")
AUDIT_PAGE_SIZE = 50


def signed_in_user(request: HttpRequest) -> User:
    """The user behind a request that passed @login_required, typed for the services."""
    user = request.user
    if not isinstance(user, User):
        raise PermissionDenied("Sign in first.")
    return user


def staff_required(
    view: Callable[Concatenate[HttpRequest, P], HttpResponse],
) -> Callable[Concatenate[HttpRequest, P], HttpResponse]:
    """403 unless the signed-in user is a platform admin (put it under @login_required)."""

    @wraps(view)
    def wrapper(request: HttpRequest, /, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only platform admins can open this page.")
        return view(request, *args, **kwargs)

    return wrapper


def redirect_back(request: HttpRequest, fallback: str) -> HttpResponse:
    """Redirect to the form's `next` field when it is a path on this site, else to `fallback`."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return redirect(fallback)


# --- Site icon ---------------------------------------------------------------------------------------


@cache
def _favicon_bytes() -> bytes:
    found = finders.find("img/favicon.ico")
    if not isinstance(found, str):
        raise Http404("No icon.")
    return Path(found).read_bytes()


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which browsers fetch on their own (for the API's JSON, say); pages link the SVG."""
    return HttpResponse(_favicon_bytes(), content_type="image/x-icon")


REDOC_BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
# ReDoc's side menu shows Redocly's logo from their CDN, whatever its options say; an empty data: URL instead
# loads nothing from the internet (and the CSP allows data: images). The link next to it is only a link.
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@cache
def _redoc_bundle() -> bytes:
    found = finders.find(REDOC_BUNDLE)
    if not isinstance(found, str):
        raise Http404("No ReDoc bundle.")
    return Path(found).read_bytes().replace(REDOC_LOGO.encode(), b"data:,")


@require_GET
@cache_control(max_age=86400, public=True)
def redoc_bundle(request: HttpRequest) -> HttpResponse:
    """The installed ReDoc bundle (drf-spectacular-sidecar), minus the one thing it fetches from the internet."""
    return HttpResponse(_redoc_bundle(), content_type="text/javascript; charset=utf-8")


# --- API tokens ---------------------------------------------------------------------------------------


# The session key that carries a new token's secret from the POST to the one GET that shows it.
NEW_TOKEN_SESSION_KEY = "fatia_new_token"  # noqa: S105 (a session key name, not a secret)


@login_required
@never_cache  # the response that shows a new token's secret must not be cached anywhere
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """List and create tokens. A created token's secret travels in the session to the redirected GET,
    which shows it once and drops it (POST-redirect-GET: reloading never creates a second token)."""
    user = signed_in_user(request)
    form = ApiTokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        made = submit_form(
            form,
            lambda: services.create_api_token(
                user=user,
                name=form.cleaned_data["name"],
                scope=form.cleaned_data["scope"],
                expires_at=form.expires_at(),
                actor=user,
            ),
            aliases={"expires_at": "expires_in_days"},
        )
        if made is not None:
            token, secret = made
            request.session[NEW_TOKEN_SESSION_KEY] = {"id": token.pk, "name": token.name, "secret": secret}
            return redirect("tokens")
    created = request.session.pop(NEW_TOKEN_SESSION_KEY, None) if request.method == "GET" else None
    return render(
        request,
        "tenants/tokens.html",
        {
            "form": form,
            "tokens": tenant_selectors.api_tokens_for_user(user),
            "new_token": created,
            "new_secret": created["secret"] if created else None,
        },
        status=form_status(form),
    )


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    user = signed_in_user(request)
    try:
        token = services.revoke_api_token(token_id=token_id, actor=user)
    except ApiToken.DoesNotExist as exc:
        raise Http404("No such token.") from exc
    messages.success(request, f"Token “{token.name}” ({token.prefix}) is revoked; it no longer works.")
    return redirect("tokens")


# --- Admin: tenants and members -----------------------------------------------------------------------


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def manage_tenants(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    form = TenantCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        tenant = submit_form(form, lambda: services.create_tenant(actor=user, **form.cleaned_data))
        if tenant is not None:
            messages.success(request, f"Tenant {tenant.name} is created. Add its members and set its quotas.")
            return redirect("manage-tenant", tenant_id=tenant.pk)
    return render(
        request,
        "tenants/manage_tenants.html",
        {"form": form, "tenants": tenant_selectors.tenants_overview()},
        status=form_status(form),
    )


def _tenant_or_404(user: User, tenant_id: int) -> Tenant:
    tenant = Tenant.objects.for_user(user).filter(pk=tenant_id).first()
    if tenant is None:
        raise Http404("No such tenant.")
    return tenant


def _tenant_page(
    request: HttpRequest,
    tenant: Tenant,
    *,
    policy_form: TenantPolicyForm | None = None,
    member_form: MemberAddForm | None = None,
) -> HttpResponse:
    return render(
        request,
        "tenants/manage_tenant.html",
        {
            "tenant": tenant,
            "policy_form": policy_form or TenantPolicyForm.for_tenant(tenant),
            "member_form": member_form or MemberAddForm(),
            "memberships": tenant_selectors.memberships_of(tenant),
            "role_choices": Membership.Role.choices,
        },
        status=form_status(policy_form, member_form),
    )


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def manage_tenant(request: HttpRequest, tenant_id: int) -> HttpResponse:
    """A tenant's policy (editable) and its members."""
    user = signed_in_user(request)
    tenant = _tenant_or_404(user, tenant_id)
    if request.method == "GET":
        return _tenant_page(request, tenant)
    form = TenantPolicyForm.for_tenant(tenant, request.POST)
    if form.is_valid():
        saved = submit_form(
            form, lambda: services.update_tenant_policy(tenant_id=tenant.pk, actor=user, **form.cleaned_data)
        )
        if saved is not None:
            messages.success(request, f"The policy of {saved.name} is saved.")
            return redirect("manage-tenant", tenant_id=saved.pk)
    return _tenant_page(request, tenant, policy_form=form)


@login_required
@staff_required
@require_POST
def member_add(request: HttpRequest, tenant_id: int) -> HttpResponse:
    user = signed_in_user(request)
    tenant = _tenant_or_404(user, tenant_id)
    form = MemberAddForm(request.POST)
    if form.is_valid():
        membership = submit_form(
            form,
            lambda: services.add_member(
                tenant_id=tenant.pk,
                username=form.cleaned_data["username"].strip(),
                role=form.cleaned_data["role"],
                actor=user,
            ),
        )
        if membership is not None:
            messages.success(
                request, f"{membership.user.get_username()} is now a {membership.get_role_display().lower()}."
            )
            return redirect("manage-tenant", tenant_id=tenant.pk)
    return _tenant_page(request, tenant, member_form=form)


def _membership_or_404(membership_id: int) -> Membership:
    membership = Membership.objects.select_related("user", "tenant").filter(pk=membership_id).first()
    if membership is None:
        raise Http404("No such membership.")
    return membership


@login_required
@staff_required
@require_POST
def member_role(request: HttpRequest, membership_id: int) -> HttpResponse:
    user = signed_in_user(request)
    membership = _membership_or_404(membership_id)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a role: member or manager.")
        return redirect("manage-tenant", tenant_id=membership.tenant_id)
    changed = run_action(
        request,
        lambda: services.change_member_role(membership_id=membership.pk, role=form.cleaned_data["role"], actor=user),
    )
    if changed is not None:
        messages.success(request, f"{changed.user.get_username()} is now a {changed.get_role_display().lower()}.")
    return redirect("manage-tenant", tenant_id=membership.tenant_id)


@login_required
@staff_required
@require_POST
def member_remove(request: HttpRequest, membership_id: int) -> HttpResponse:
    user = signed_in_user(request)
    membership = _membership_or_404(membership_id)
    try:
        services.remove_member(membership_id=membership.pk, actor=user)
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from exc
    messages.success(request, f"{membership.user.get_username()} is no longer in {membership.tenant.name}.")
    return redirect("manage-tenant", tenant_id=membership.tenant_id)


# --- Admin: audit log ---------------------------------------------------------------------------------


@login_required
@staff_required
@require_GET
def audit_log(request: HttpRequest) -> HttpResponse:
    """The audit log, read-only, filtered by the query string and paginated."""
    user = signed_in_user(request)
    verbs, object_types = tenant_selectors.audit_filter_choices(user)
    form = AuditFilterForm(
        request.GET or None,
        tenants=Tenant.objects.for_user(user).order_by("name"),
        verbs=verbs,
        object_types=object_types,
    )
    events = tenant_selectors.audit_events_for_user(user, **form.filters())
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "tenants/audit_log.html", {"form": form, "page": page})
