"""The page where a tenant's managers (and platform admins) set idle reclaim; members see it read-only."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from tenants import services
from tenants.forms import IdleReclaimForm, form_status
from tenants.models import Tenant
from tenants.selectors import can_manage_tenant
from tenants.service_calls import submit_form
from tenants.views import signed_in_user

FIELD_ALIASES = {"idle_reclaim_enabled": "enabled"}


@login_required
@require_http_methods(["GET", "POST"])
def idle_reclaim(request: HttpRequest, tenant_id: int) -> HttpResponse:
    user = signed_in_user(request)
    tenant = Tenant.objects.for_user(user).filter(pk=tenant_id).first()
    if tenant is None:
        raise Http404("No such tenant.")
    may_change = can_manage_tenant(user, tenant.pk)
    form = IdleReclaimForm.for_tenant(tenant, request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if not may_change:
            raise PermissionDenied("Only the tenant's managers and platform admins can change idle reclaim.")
        if form.is_valid():
            data = form.cleaned_data
            saved = submit_form(
                form,
                lambda: services.set_idle_reclaim(
                    tenant_id=tenant.pk,
                    actor=user,
                    enabled=data["enabled"],
                    idle_after_minutes=data["idle_after_minutes"],
                    idle_grace_minutes=data["idle_grace_minutes"],
                ),
                aliases=FIELD_ALIASES,
            )
            if saved is not None:
                state = "on" if data["enabled"] else "off"
                messages.success(request, f"Idle reclaim for {tenant.name} is {state}.")
                return redirect("tenant-idle-reclaim", tenant_id=tenant.pk)
    if not may_change:
        for field in form.fields.values():
            field.disabled = True
    return render(
        request,
        "tenants/idle_reclaim.html",
        {"tenant": tenant, "form": form, "may_change": may_change},
        status=form_status(form),
    )
