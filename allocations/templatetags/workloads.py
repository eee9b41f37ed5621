"""The request page's manifests panel and the request form's advisor panel (issue 17), as inclusion tags that
read their own GET parameters, so that both work without JavaScript and the shared views stay as they are."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import template
from django.urls import reverse

from allocations.advisor.estimate import MODES, PRECISIONS
from allocations.advisor.known_models import KNOWN_MODELS
from allocations.advisor.pools import advice_payload
from allocations.models import Allocation
from allocations.workloads.documents import dump_documents
from allocations.workloads.from_allocation import claim_target
from allocations.workloads.manifests import KINDS, WorkloadInputError, build_manifests, parse_options
from tenants.errors import InvalidInput

register = template.Library()

MANIFEST_FIELDS = ("kind", "name", "image", "command", "model", "args", "share")
ADVISOR_FIELDS = ("model", "params_b", "precision", "context_length", "sequences", "mode")
KIND_LABELS = {
    "pod": "Pod",
    "job": "Job",
    "deployment": "Deployment",
    "notebook": "Jupyter notebook",
    "vllm": "vLLM model server",
}


@register.inclusion_tag("allocations/includes/workload_manifests.html", takes_context=True)
def workload_manifests(context: dict[str, Any], allocation: Allocation) -> dict[str, Any]:
    query = context["request"].GET
    raw = {key: query[key] for key in MANIFEST_FIELDS if query.get(key)}
    raw.setdefault("kind", "pod")
    target = claim_target(allocation)
    errors: dict[str, list[str]] = {}
    text = ""
    try:
        options = parse_options(raw, target)
    except WorkloadInputError as exc:
        errors = exc.errors
    else:
        text = dump_documents(build_manifests(target, options))
    download = reverse("request-manifests-download", args=[allocation.pk]) + "?" + urlencode(raw)
    return {
        "allocation": allocation,
        "kinds": [(k, KIND_LABELS[k]) for k in KINDS],
        "values": raw,
        "errors": errors,
        "yaml": text,
        "download": download,
        "shares": range(len(target.claim_names)) if target.shared else None,
    }


@register.inclusion_tag("allocations/includes/advisor_panel.html", takes_context=True)
def advisor_panel(context: dict[str, Any]) -> dict[str, Any]:
    query = context["request"].GET
    raw = {key: query[key] for key in ADVISOR_FIELDS if query.get(key)}
    advice = None
    errors: dict[str, list[str]] = {}
    if raw:
        try:
            advice = advice_payload(raw)
        except InvalidInput as exc:
            errors = exc.errors
    return {
        "values": raw,
        "errors": errors,
        "advice": advice,
        "known_models": [(name, f"{name} ({a.params_b:g} B)") for name, a in KNOWN_MODELS.items()],
        "precisions": PRECISIONS,
        "modes": [
            (m, {"serve": "Serve (inference)", "full": "Fine-tune, full", "lora": "Fine-tune, LoRA"}[m]) for m in MODES
        ],
        "action": reverse("request-new"),
    }
