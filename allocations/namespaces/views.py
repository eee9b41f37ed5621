"""/tenants/<id>/namespaces/: the namespaces a tenant's requests may put their claims in. Members and managers of
the tenant read it; platform admins also assign an existing namespace and remove one (refused, with the reason,
while requests that are not over have claims there)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from allocations.namespaces.selectors import namespace_rows
from allocations.services.tenant_namespaces import NamespaceInUse, assign_namespace, remove_namespace
from tenants.errors import NotAllowed
from tenants.models import Tenant, TenantNamespace
from tenants.service_calls import submit_form
from tenants.views import signed_in_user, staff_required


class AssignNamespaceForm(forms.Form):
    name = forms.CharField(
        max_length=63,
        label="Namespace",
        help_text="An existing namespace on the cluster (lowercase letters, digits and hyphens).",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )


def _tenant_or_404(request: HttpRequest, tenant_id: int) -> Tenant:
    tenant = Tenant.objects.for_user(signed_in_user(request)).filter(pk=tenant_id).first()
    if tenant is None:
        raise Http404("No such tenant.")
    return tenant


def _page(request: HttpRequest, tenant: Tenant, form: AssignNamespaceForm | None = None) -> HttpResponse:
    """The page; with the bound form of a refused POST it is a 400, as every form of the portal answers bad input."""
    user = signed_in_user(request)
    return render(
        request,
        "allocations/tenant_namespaces.html",
        {
            "tenant": tenant,
            "rows": namespace_rows(user, tenant),
            "may_change": user.is_staff,
            "form": (form or AssignNamespaceForm()) if user.is_staff else None,
        },
        status=400 if form is not None and form.errors else 200,
    )


@login_required
@require_http_methods(["GET", "POST"])
def tenant_namespaces(request: HttpRequest, tenant_id: int) -> HttpResponse:
    user = signed_in_user(request)
    tenant = _tenant_or_404(request, tenant_id)
    if request.method == "GET":
        return _page(request, tenant)
    if not user.is_staff:
        raise PermissionDenied("Only platform admins assign namespaces.")
    form = AssignNamespaceForm(request.POST)
    if form.is_valid():
        ns = submit_form(
            form, lambda: assign_namespace(tenant_id=tenant.pk, name=form.cleaned_data["name"], actor=user)
        )
        if ns is not None:
            messages.success(
                request, f"{ns.name} is {tenant.name}'s; its RoleBindings are applied on the cluster in a moment."
            )
            return redirect("tenant-namespaces", tenant_id=tenant.pk)
    return _page(request, tenant, form)


@login_required
@staff_required
@require_POST
def tenant_namespace_remove(request: HttpRequest, tenant_id: int, namespace_id: int) -> HttpResponse:
    user = signed_in_user(request)
    tenant = _tenant_or_404(request, tenant_id)
    ns = TenantNamespace.objects.for_user(user).filter(tenant=tenant, pk=namespace_id).first()
    if ns is None:
        raise Http404("No such namespace of this tenant.")
    try:
        remove_namespace(namespace_id=ns.pk, actor=user)
    except NamespaceInUse as exc:
        messages.error(request, exc.message)
    except NotAllowed as exc:
        raise PermissionDenied(exc.message) from exc
    else:
        messages.success(
            request, f"{ns.name} is no longer {tenant.name}'s; the portal's bindings there are removed in a moment."
        )
    return redirect("tenant-namespaces", tenant_id=tenant.pk)
