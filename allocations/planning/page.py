"""The what-if page, /manage/pools/<id>/what-if/: three questions about one pool, each a form (GET: nothing is
written) and its answer, from allocations/planning/answers.py. Who may ask is the API's rule (answers.may_plan):
platform admins, and managers of a tenant with quota in the pool, who ask the quota question about the tenants
they manage only; anyone else gets a 403. Bad input is a field error on the form (a 400), never an error page."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.forms import Form
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from allocations.models import NodePool, Quota
from tenants.errors import InvalidInput
from tenants.forms import form_status
from tenants.selectors import managed_tenant_ids
from tenants.views import signed_in_user

from . import answers
from .forms import AddGpusForm, QuotaForm

QUESTIONS = ("add-gpus", "quota", "mix")


def _show_errors(form: Form, exc: InvalidInput) -> None:
    for field, messages in exc.errors.items():
        for message in messages:
            form.add_error(field if field in form.fields else None, message)


def _tenant_choices(user: User, pool: NodePool) -> list[tuple[str, str]]:
    """The tenants with quota in the pool that the user may ask about (an admin: all), by name."""
    rows = Quota.objects.filter(pool=pool, tenant_id__in=managed_tenant_ids(user)).select_related("tenant")
    return [(str(q.tenant.pk), q.tenant.name) for q in rows.order_by("tenant__name")]


@login_required
@require_GET
def pool_what_if(request: HttpRequest, pool_id: int) -> HttpResponse:
    user = signed_in_user(request)
    found = NodePool.objects.filter(pk=pool_id).first()
    if found is None:
        raise Http404("No such pool.")
    if not answers.may_plan(user, found):
        # Who may ask does not depend on the question, as in the API.
        raise PermissionDenied("Only platform admins and managers of a tenant with quota in this pool ask what-if.")
    question = request.GET.get("q", "")
    context: dict[str, Any] = {"pool": found, "question": question}
    bound = question in QUESTIONS
    add_form = AddGpusForm(request.GET if question == "add-gpus" else None, initial={"model": found.gpu_model})
    quota_form = QuotaForm(request.GET if question == "quota" else None, tenants=_tenant_choices(user, found))
    context |= {"add_form": add_form, "quota_form": quota_form}
    try:
        pool = answers.plannable_pool(user, found)
    except InvalidInput as exc:
        context["refusal"] = exc.message
        return render(request, "allocations/manage_what_if.html", context)
    if not bound:
        return render(request, "allocations/manage_what_if.html", context)
    try:
        if question == "add-gpus" and add_form.is_valid():
            v = add_form.cleaned_data
            found_answer = answers.add_gpus(
                pool=pool, count=v["count"], model=v["model"] or "", gpus_per_node=v["gpus_per_node"]
            )
            context["add_answer"] = found_answer
            context["add_rows"] = [
                (p, n, found_answer.after.fits.get(p, 0)) for p, n in found_answer.before.fits.items()
            ]
        elif question == "quota" and quota_form.is_valid():
            v = quota_form.cleaned_data
            tenant, context["quota_answer"] = answers.quota(
                user=user, pool=pool, tenant=v["tenant"], factor=v["factor"], compute=v["compute"], memory=v["memory"]
            )
            context["quota_tenant"] = tenant
        elif question == "mix":
            context["mix_answer"] = answers.mix(pool=pool)
    except InvalidInput as exc:
        _show_errors(add_form if question == "add-gpus" else quota_form, exc)
    # The asked question's form with field errors is a 400, as on every page with a form.
    asked = {"add-gpus": add_form, "quota": quota_form}.get(question)
    return render(request, "allocations/manage_what_if.html", context, status=form_status(asked))
