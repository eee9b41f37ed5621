"""Queued telemetry (FATIA_INGEST_QUEUE_URL): check the report, queue it, answer 202 ``{"queued": n, "commands":
0|1}``, or 503 with Retry-After while the queue is over its bound or unreachable.

No query on this path in the steady state: the credential is the one every web process shares in Redis
(``shared_credentials.py``), checked in the same Lua script that queues the report; a token Redis does not know is
looked up in the database once, then shared. The body is checked before the credential's shared entry is read
(that read is the append's round trip), so a bad body is answered 400 only after the credential was checked the
usual way: an unknown caller gets 401 whatever it sends, as before.
"""

from __future__ import annotations

import redis
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from allocations.nodeagent import ingest_queue, services, shared_credentials
from allocations.nodeagent.api import answers
from allocations.nodeagent.authentication import AgentAuthError, check_agent_header, parse_agent_header


def accept_queued(request: HttpRequest) -> JsonResponse:
    header = request.headers.get("Authorization", "")
    try:
        token, _ = parse_agent_header(header)
    except AgentAuthError as exc:
        return answers.unauthorized(request, exc)
    payload = answers.read_report(request)
    if isinstance(payload, JsonResponse):
        try:
            check_agent_header(header)
        except AgentAuthError as exc:
            return answers.unauthorized(request, exc)
        return payload
    digest = services.hash_agent_token(token)
    now = timezone.now()
    try:
        try:
            accepted = ingest_queue.accept_from_agent(digest=digest, payload=payload, accepted_at=now)
        except ingest_queue.NotShared:
            try:
                credential = check_agent_header(header)
            except AgentAuthError as exc:
                return answers.unauthorized(request, exc)
            accepted = ingest_queue.accept_from_agent(
                digest=digest,
                payload=payload,
                accepted_at=now,
                known=shared_credentials.entry(credential),
                keep_s=settings.FATIA_INGEST_CREDENTIAL_TTL_S,
            )
    except ingest_queue.ForAnotherNode as exc:
        return answers.wrong_node(exc.node_name, payload["node"])
    except (ingest_queue.Backlogged, redis.RedisError, OSError) as exc:
        response = answers.error(
            503,
            "unavailable",
            "The portal is behind on telemetry; nothing was queued. Send it again later."
            if isinstance(exc, ingest_queue.Backlogged)
            else "The telemetry queue is unreachable; nothing was queued. Send it again later.",
        )
        response["Retry-After"] = str(settings.FATIA_INGEST_RETRY_AFTER_S)
        return response
    if accepted.touch_due:
        services.note_agent_credential_used(credential_id=accepted.credential_id, now=now)
    return JsonResponse({"queued": len(payload["samples"]), "commands": accepted.commands}, status=202)
