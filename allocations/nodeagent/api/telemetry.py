"""``POST /api/v1/agent/telemetry/``: a plain Django view, the one hot endpoint (every node, every 5 s).

DRF's request wrapping, negotiation and response rendering are skipped; what clients see is the same as on the
other agent endpoints: 401 for a bad credential (429 past the anonymous rate), 400 with ``errors`` per field from
the same compiled validator, 400 ``too_large`` or ``parse_error``, 403 for another node's report. The OpenAPI
schema still documents it through ``views.TelemetryView`` (see ``urls.py``).

With FATIA_INGEST_QUEUE_URL the report is queued and answered 202 (``telemetry_queued.py``); without it, applied at
once and answered 200 (``{"accepted", "duplicates", "commands"}``). ``commands`` non-zero: MIG commands wait for
this node, so its agent polls now.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from allocations.nodeagent import ingest_queue, selectors, services
from allocations.nodeagent.api import answers
from allocations.nodeagent.api.telemetry_queued import accept_queued
from allocations.nodeagent.authentication import AgentAuthError, check_agent_header


@csrf_exempt
def telemetry(request: HttpRequest) -> JsonResponse:
    if request.method != "POST":
        response = answers.error(405, "method_not_allowed", f'Method "{request.method}" not allowed.')
        response["Allow"] = "POST"
        return response
    if ingest_queue.enabled():
        return accept_queued(request)
    try:
        credential = check_agent_header(request.headers.get("Authorization", ""))
    except AgentAuthError as exc:
        return answers.unauthorized(request, exc)
    payload = answers.read_report(request)
    if isinstance(payload, JsonResponse):
        return payload
    node = credential.node
    if payload["node"] != node.name:
        return answers.wrong_node(node.name, payload["node"])
    now = timezone.now()
    services.touch_agent_credential(credential=credential, now=now)
    result = services.record_telemetry(credential=credential, payload=payload, now=now)
    waiting = selectors.commands_waiting(node_id=node.pk)
    return JsonResponse({"accepted": result.accepted, "duplicates": result.duplicates, "commands": waiting})
