"""The platform admin's single sign-on page (/manage/sso/): group -> tenant/role mappings and what is configured.

Each view parses a form and calls one service (tenants/sso/services.py)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from tenants.forms import MemberRoleForm, SsoGroupMappingForm
from tenants.models import Membership, SsoGroupMapping
from tenants.service_calls import submit_form
from tenants.sso import services
from tenants.views import signed_in_user, staff_required


def _page(request: HttpRequest, form: SsoGroupMappingForm, status: int = 200) -> HttpResponse:
    return render(
        request,
        "tenants/manage_sso.html",
        {
            "form": form,
            "mappings": SsoGroupMapping.objects.select_related("tenant").order_by("group", "tenant__name"),
            "role_choices": Membership.Role.choices,
            "issuer": settings.FATIA_OIDC_ISSUER,
            "client_id": settings.FATIA_OIDC_CLIENT_ID,
            "groups_claim": settings.FATIA_OIDC_GROUPS_CLAIM,
            "admin_groups": settings.FATIA_OIDC_ADMIN_GROUPS,
            "local_login": settings.FATIA_LOCAL_LOGIN,
            "auth_proxy": settings.FATIA_AUTH_PROXY,
            "proxy_cidrs": settings.FATIA_AUTH_PROXY_TRUSTED_CIDRS,
        },
        status=status,
    )


@login_required
@staff_required
@require_http_methods(["GET", "POST"])
def manage_sso(request: HttpRequest) -> HttpResponse:
    user = signed_in_user(request)
    form = SsoGroupMappingForm(request.POST or None)
    if request.method == "POST":
        if form.is_valid():
            mapping = submit_form(
                form,
                lambda: services.create_sso_group_mapping(
                    group=form.cleaned_data["group"],
                    tenant_id=form.cleaned_data["tenant"].pk,
                    role=form.cleaned_data["role"],
                    actor=user,
                ),
            )
            if mapping is not None:
                messages.success(
                    request,
                    f"Members of {mapping.group} become {mapping.get_role_display().lower()}s of "
                    f"{mapping.tenant.name} at their next sign-in.",
                )
                return redirect("manage-sso")
        return _page(request, form, status=400)
    return _page(request, form)


def _mapping_or_404(mapping_id: int) -> SsoGroupMapping:
    mapping = SsoGroupMapping.objects.select_related("tenant").filter(pk=mapping_id).first()
    if mapping is None:
        raise Http404("No such mapping.")
    return mapping


@login_required
@staff_required
@require_POST
def sso_mapping_role(request: HttpRequest, mapping_id: int) -> HttpResponse:
    user = signed_in_user(request)
    mapping = _mapping_or_404(mapping_id)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a role: member or manager.")
        return redirect("manage-sso")
    mapping = services.update_sso_group_mapping(mapping_id=mapping.pk, role=form.cleaned_data["role"], actor=user)
    messages.success(
        request, f"{mapping.group} now gives {mapping.get_role_display().lower()} in {mapping.tenant.name}."
    )
    return redirect("manage-sso")


@login_required
@staff_required
@require_POST
def sso_mapping_remove(request: HttpRequest, mapping_id: int) -> HttpResponse:
    user = signed_in_user(request)
    mapping = _mapping_or_404(mapping_id)
    services.delete_sso_group_mapping(mapping_id=mapping.pk, actor=user)
    messages.success(
        request,
        f"{mapping.group} no longer maps to {mapping.tenant.name}; its members leave it at their next sign-in.",
    )
    return redirect("manage-sso")
