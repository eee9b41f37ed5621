"""Audit events in words, for the request timeline and the audit log.

`describe_event` writes one sentence per event ("mallory approved the request"); `event_fields` lists
what changed as (label, value) pairs. Both render dates as "2026-12-01 14:00 UTC", lists and mappings as
text: the pages never show a raw ISO timestamp or a Python dict (issue 9). The API keeps the raw
before/after JSON for scripts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tenants.models import AuditEvent

NONE = "—"
# "h100-node-0/gpu-3:2+1": a slice's node, GPU index, first memory slot and slot count, as services write it.
SLICE = re.compile(r"^(?P<node>[^/]+)/gpu-(?P<gpu>\d+):(?P<start>\d+)\+(?P<size>\d+)$")
LABELS = {
    "lease_expires_at": "lease ends",
    "lease_hours": "lease (hours)",
    "hours": "added hours",
    "compute_slices": "compute slices",
    "memory_slices": "memory slots",
    "compute_slices_limit": "compute slices limit",
    "memory_slices_limit": "memory slots limit",
    "auto_approve_max_compute_slices": "auto-approve up to (compute slices)",
    "auto_approve_max_lease_hours": "auto-approve up to (hours)",
    "movable_by_default": "new requests movable",
    "max_lease_hours": "longest lease (hours)",
    "profile_caps": "per-profile caps",
    "expires_at": "expires",
    "email": "e-mailed",
    "extension": "extension",
}


def slot_range(start: int, size: int) -> str:
    """'slot 3' for a one-slot instance, 'slots 0–3' for a wider one."""
    return f"slot {start}" if size <= 1 else f"slots {start}–{start + size - 1}"


def human_when(value: object) -> str:
    """A datetime or ISO 8601 string as '2026-12-01 14:00 UTC'; anything else as text."""
    moment = value if isinstance(value, datetime) else _parse(value)
    if moment is None:
        return str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def _parse(value: object) -> datetime | None:
    if not isinstance(value, str) or len(value) < 16 or value[4:5] != "-" or value[10:11] != "T":
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def human_value(value: Any) -> str:
    """One field's value as words: dates, slices, lists and mappings included."""
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime) or _parse(value) is not None:
        return human_when(value)
    if isinstance(value, str):
        match = SLICE.match(value)
        if match:
            return f"{match['node']} GPU {match['gpu']}, {slot_range(int(match['start']), int(match['size']))}"
        return value
    if isinstance(value, dict):
        return ", ".join(f"{k} {human_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list | tuple):
        return "; ".join(human_value(v) for v in value) or "none"
    return str(value)


def event_fields(event: AuditEvent) -> list[tuple[str, str]]:
    """What changed, as (label, value): 'pending → approved' when a field changed, the value when it is new,
    and 'was …' when it went away. Fields whose value stayed the same are left out."""
    before = event.before if isinstance(event.before, dict) else {}
    after = event.after if isinstance(event.after, dict) else {}
    rows = []
    for key in dict.fromkeys([*before, *after]):
        label = LABELS.get(key, key.replace("_", " "))
        if key in before and key in after:
            if before[key] != after[key]:
                rows.append((label, f"{human_value(before[key])} → {human_value(after[key])}"))
        elif key in after:
            rows.append((label, human_value(after[key])))
        else:
            rows.append((label, f"was {human_value(before[key])}"))
    return rows


def _reason(after: dict[str, Any]) -> str:
    reason = after.get("reason")
    return f": “{reason}”" if reason else ""


def _until(after: dict[str, Any]) -> str:
    return f", until {human_when(after['lease_expires_at'])}" if after.get("lease_expires_at") else ""


def _added(before: dict[str, Any], after: dict[str, Any]) -> object:
    if "hours" in after:
        return after["hours"]
    try:
        return int(after["lease_hours"]) - int(before["lease_hours"])
    except (KeyError, TypeError, ValueError):
        return "?"


def _what(after: dict[str, Any]) -> str:
    """One slice's profile, or one share's memory in a time-sliced or MPS pool (issue 13)."""
    if after.get("memory_mib") is not None:
        return f"{after['memory_mib']} MiB share"
    return str(after.get("profile", "?"))


def _waited(seconds: object) -> str:
    """'42 s', '12 min', '3.5 h' for how long a request waited in the queue."""
    if not isinstance(seconds, int | float):
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _allocation(actor: str, verb: str, before: dict[str, Any], after: dict[str, Any]) -> str | None:
    status = after.get("status")
    sentences: dict[str, Callable[[], str]] = {
        "request": lambda: (
            f"{actor} asked for {after.get('count', '?')} × {_what(after)} for {after.get('lease_hours', '?')} h"
        ),
        "auto_approve": lambda: "Approved automatically: inside the quota and the tenant's auto-approve policy",
        "approve": lambda: f"{actor} approved the request{_reason(after)}",
        "reject": lambda: f"{actor} rejected the request{_reason(after)}",
        "release": lambda: (
            f"{actor} withdrew the request"
            if before.get("status") in ("pending", "approved", "queued")
            else f"{actor} released the slices"
        ),
        "provision": lambda: (
            f"Claim {after.get('claim', '?')} created; waiting for the cluster to allocate "
            f"{human_value(after.get('plan', []))}"
        ),
        "activate": lambda: (
            f"The slices are ready: claim {after.get('claim', '?')} on "
            f"{human_value(after.get('placements') or after.get('devices') or [])}"
        ),
        "replan": lambda: "Planning again: the cluster gave the planned slots to another request",
        "placement_differs": lambda: (
            f"The cluster placed the slices elsewhere than planned: {human_value(after.get('differences', []))}"
        ),
        "expire": lambda: f"The lease ended{_until(after).replace(', until', ' at')}; releasing the slices",
        "finish_release": lambda: (
            "The slices are gone: the lease expired" if status == "expired" else "The slices are released"
        ),
        "fail": lambda: f"The request failed{_reason(after)}",
        "warn_expiry": lambda: (
            f"The requester was warned that the lease ends at {human_when(after.get('lease_expires_at'))}"
        ),
        "extend": lambda: (
            f"{actor} extended the lease by {_added(before, after)} h "
            f"to {after.get('lease_hours', '?')} h{_until(after)}"
        ),
        "request_extension": lambda: (
            f"{actor} asked to extend the lease by {after.get('hours', '?')} h, to {after.get('lease_hours', '?')} h "
            "in all; "
            + (
                "the owners of booking "
                + ", ".join(f"#{pk}" for pk in after["bookings"])
                + " whose room it would use are asked first"
                if after.get("bookings")
                else "a manager decides"
            )
        ),
        "approve_extension": lambda: (
            f"{actor} approved extending the lease by {after.get('hours', '?')} h: lease extended to "
            f"{after.get('lease_hours', '?')} h{_until(after)}{_reason(after)}"
        ),
        "reject_extension": lambda: (
            f"{actor} rejected extending the lease by {after.get('hours', '?')} h{_reason(after)}"
        ),
        "reconcile": lambda: f"Reconciled with the cluster: {human_value(list(after.values()))}",
        # Idle reclaim (allocations/services/reclaim.py)
        "flag_idle": lambda: f"Every slice has been idle since {human_when(after.get('idle_since'))}",
        "warn_idle": lambda: (
            f"The requester was warned that the idle slices are released at {human_when(after.get('release_at'))}"
        ),
        "clear_idle": lambda: f"No longer counted as idle{_reason(after)}",
        "keep_idle": lambda: (
            f"{actor} kept the idle slices; not flagged idle again before {human_when(after.get('snoozed_until'))}"
        ),
        "reclaim_idle": lambda: f"Released for being idle since {human_when(after.get('idle_since'))}",
        # Compaction (allocations/services/compaction.py, moves.py)
        "move_announced": lambda: (
            f"The owner was told that a slice moves from {after.get('from', '?')} to {after.get('to', '?')} "
            f"(compaction #{after.get('plan', '?')})"
        ),
        "move_placed": lambda: f"The moving slice is placed at {after.get('at', '?')}",
        "move": lambda: f"A slice moved from {before.get('at', '?')} to {after.get('at', '?')}; the owner was told",
        "move_skipped": lambda: f"Not moved: the request is {after.get('status', '?')} or no longer movable",
        # Kubernetes moves (allocations/cluster/moves.py)
        "move_claimed": lambda: (
            f"A new claim {after.get('claim', '?')} was made for the moving slice at {after.get('at', '?')}"
        ),
        "move_failed": lambda: (
            f"Not moved from {after.get('from', '?')} to {after.get('to', '?')}: {after.get('reason', '?')}; the new "
            "claim was deleted and the old one kept"
        ),
        "rescue": lambda: (
            f"No room as the free slots lie; compaction #{after.get('plan', '?')} moves {after.get('moves', '?')} "
            "slice(s) of movable requests to make room"
        ),
        # The queue (issue 15, allocations/services/queue.py)
        "queue": lambda: (
            "It waits in the pool's queue by the pool's choice, its quota held"
            if after.get("held")
            else "No free layout fits it yet: it waits in the pool's queue, its quota held"
        ),
        "admit": lambda: (
            f"Admitted from the queue after {_waited(after.get('waited_s'))}"
            + (
                ": its hold had reached its time limit, so it was placed where it fits"
                if after.get("forced_after_hold")
                else ""
            )
        ),
        # Holds (issue 14, allocations/services/admission.py): before, the timeline said "system: hold" and its queue
        # event that no layout fitted, which is what a hold is not.
        "hold": lambda: (
            "It fits, but every place it fits now would break up room that larger requests need: held in the queue, "
            f"placed at the latest at {human_when(after.get('held_until'))}"
        ),
        # Cohorts (issue 15, allocations/services/cohort_notices.py, cohort_reclaim.py)
        "reclaim_notice": lambda: (
            f"Runs on borrowed slices that a lender needs back (request #{after.get('for', '?')}): taken back at "
            f"{human_when(after.get('reclaim_at'))}"
        ),
        "reclaim_cancel": lambda: (
            f"The notice to take its borrowed slices back was called off: {after.get('why', '?')}"
        ),
        "reclaim": lambda: (
            f"Its borrowed slices were taken back for request #{after.get('for', '?')}; it waits again as request "
            f"#{after.get('requeued_as', '?')}"
        ),
        "set_priority": lambda: (
            f"{actor} set its priority in the tenant's queue from {before.get('priority', '?')} to "
            f"{after.get('priority', '?')}"
        ),
    }
    sentence = sentences.get(verb)
    return sentence() if sentence else None


def _operations(plan: object) -> str:
    if not isinstance(plan, list):
        return "?"
    return ", ".join(
        f"{op.get('action', '?')} {op.get('profile', '?')} at slot {op.get('start', '?')}"
        for op in plan
        if isinstance(op, dict)
    )


def _other(actor: str, object_type: str, verb: str, before: dict[str, Any], after: dict[str, Any]) -> str | None:
    def limits(values: dict[str, Any]) -> str:
        caps = values.get("profile_caps") or {}
        listed = ", ".join(f"{k} ≤ {v}" for k, v in caps.items()) if isinstance(caps, dict) else ""
        capped = f" (caps: {listed})" if listed else ""
        return (
            f"{values.get('compute_slices_limit', '?')} compute slices and "
            f"{values.get('memory_slices_limit', '?')} memory slots{capped}"
        )

    sentences: dict[tuple[str, str], Callable[[], str]] = {
        ("quotachangerequest", "request_quota_change"): lambda: f"{actor} asked for a quota of {limits(after)}",
        ("quotachangerequest", "approve"): lambda: f"{actor} approved the quota change{_reason(after)}",
        ("quotachangerequest", "reject"): lambda: f"{actor} rejected the quota change{_reason(after)}",
        ("quota", "set_quota"): lambda: f"{actor} set the quota to {limits(after)}",
        # Cohorts (issue 15, allocations/cohorts/config.py).
        ("quota", "set_quota_cohort"): lambda: (
            f"{actor} put the quota in cohort {after['cohort_name']}"
            if after.get("cohort_name")
            else f"{actor} took the quota out of cohort {before.get('cohort_name') or '?'}"
        ),
        ("cohort", "create_cohort"): lambda: (
            f"{actor} created cohort {after.get('name', '?')} in {after.get('pool', '?')} "
            f"(grace {after.get('reclaim_grace_minutes', '?')} min)"
        ),
        ("cohort", "update_cohort"): lambda: (
            f"{actor} changed cohort {after.get('name', '?')} (grace {after.get('reclaim_grace_minutes', '?')} min)"
        ),
        ("cohort", "delete_cohort"): lambda: f"{actor} deleted cohort {before.get('name', '?')}",
        ("tenant", "create"): lambda: f"{actor} created tenant {after.get('name', '?')}",
        ("tenant", "update"): lambda: f"{actor} changed the policy of tenant {after.get('name', '?')}",
        ("tenant", "set_idle_reclaim"): lambda: (
            f"{actor} turned idle reclaim {'on' if after.get('idle_reclaim_enabled') else 'off'} "
            f"(idle after {after.get('idle_after_minutes', '?')} min, grace {after.get('idle_grace_minutes', '?')} min)"
        ),
        ("membership", "add_member"): lambda: f"{actor} added {after.get('user', '?')} as {after.get('role', '?')}",
        ("membership", "change_role"): lambda: f"{actor} made {after.get('user', '?')} a {after.get('role', '?')}",
        ("membership", "remove_member"): lambda: f"{actor} removed {before.get('user', '?')} from the tenant",
        ("ssogroupmapping", "create"): lambda: (
            f"{actor} mapped group {after.get('group', '?')} to {after.get('role', '?')} in {after.get('tenant', '?')}"
        ),
        ("ssogroupmapping", "update"): lambda: (
            f"{actor} made group {after.get('group', '?')} give {after.get('role', '?')} in {after.get('tenant', '?')}"
        ),
        ("ssogroupmapping", "delete"): lambda: (
            f"{actor} stopped mapping group {before.get('group', '?')} to {before.get('tenant', '?')}"
        ),
        ("user", "create_sso_user"): lambda: f"{actor} created user {after.get('user', '?')} at their first sign-in",
        ("user", "grant_admin"): lambda: f"{actor} made {after.get('user', '?')} a platform admin",
        ("user", "revoke_admin"): lambda: f"{actor} took platform admin away from {before.get('user', '?')}",
        ("apitoken", "create_token"): lambda: (
            f"{actor} created API token “{after.get('name', '?')}” ({after.get('scope', '?')})"
        ),
        ("apitoken", "revoke_token"): lambda: f"{actor} revoked API token {after.get('prefix', '?')}",
        ("nodepool", "create"): lambda: f"{actor} created pool {after.get('name', '?')}",
        ("nodepool", "update"): lambda: f"{actor} changed pool {after.get('name', '?')}",
        ("node", "register_node"): lambda: f"{actor} registered a node with {after.get('gpus', '?')} GPUs",
        ("node", "reconcile"): lambda: (
            f"The node went from {human_value(before.get('state'))} to {human_value(after.get('state'))}"
        ),
        # Fleet discovery (allocations/cluster/discovery.py).
        ("node", "node_joined"): lambda: f"Discovery: the node joined pool {after.get('pool', '?')}",
        ("node", "node_left"): lambda: (
            f"Discovery: the node left pool {before.get('pool', '?')}: {after.get('note') or 'its labels changed'}"
        ),
        ("node", "node_unmatched"): lambda: f"Discovery: a GPU node in no pool: {after.get('note', '?')}",
        ("node", "node_gone"): lambda: "The node left the cluster",
        ("node", "node_back"): lambda: "The node is back in the cluster",
        # Static MIG (allocations/services/reconfiguration.py).
        ("node", "node_reconfiguring"): lambda: (
            f"MIG layout change #{after.get('reconfiguration', '?')} started; no new slice is placed on the node"
        ),
        ("node", "node_reconfigured"): lambda: f"MIG layout change #{after.get('reconfiguration', '?')} is over",
        ("migreconfiguration", "reconfiguration_requested"): lambda: (
            f"{actor} asked for a MIG layout change of {after.get('node', '?')}/gpu-{after.get('gpu', '?')} "
            f"({_operations(after.get('plan'))}) for {after.get('reason', '?')}"
        ),
        ("migreconfiguration", "reconfiguration_step"): lambda: (
            f"MIG layout change: {human_value(after.get('status'))} ({after.get('step', '')})"
            + (f": {after['error']}" if after.get("error") else "")
        ),
        ("migreconfiguration", "reconfiguration_finished"): lambda: (
            f"MIG layout change {human_value(after.get('status'))}"
            + (f": {after['error']}" if after.get("error") else "")
        ),
        # Compaction (allocations/services/compaction.py).
        ("moveplan", "compaction_started"): lambda: (
            f"Compaction of {after.get('pool', '?')} started ({after.get('trigger', '?')}): "
            f"{len(after.get('moves') or [])} move(s), whole GPUs free {after.get('whole_gpus_before', '?')} -> "
            f"{after.get('whole_gpus_after', '?')}"
        ),
        ("moveplan", "compaction_finished"): lambda: (
            f"Compaction {human_value(after.get('status'))}: {after.get('message', '')}"
        ),
        # Node agents (allocations/nodeagent/).
        ("node", "agent_silent"): lambda: "The node's agent went silent; no new slice is placed there until it reports",
        ("node", "agent_back"): lambda: "The node's agent reports again",
        ("agentcredential", "issue_agent_credential"): lambda: (
            f"{actor} issued agent credential {after.get('prefix', '?')} for node {after.get('node', '?')}"
        ),
        ("agentcredential", "revoke_agent_credential"): lambda: (
            f"{actor} revoked agent credential {after.get('prefix', '?')} of node {after.get('node', '?')}"
        ),
        ("node", "gpus_changed"): lambda: (
            f"Discovery: the node's GPUs changed (added {human_value(after.get('added'))}; removed "
            f"{human_value(after.get('removed'))}; changed {human_value(after.get('changed'))}; driver "
            f"{human_value(after.get('driver_version'))}; DynamicMIG {human_value(after.get('dynamic_mig'))})"
        ),
    }
    sentence = sentences.get((object_type, verb))
    return sentence() if sentence else None


def describe_event(event: AuditEvent) -> str:
    """One sentence for the event, naming who acted when a person did."""
    before = event.before if isinstance(event.before, dict) else {}
    after = event.after if isinstance(event.after, dict) else {}
    actor = event.actor_name or "system"
    sentence = (
        _allocation(actor, event.verb, before, after)
        if event.object_type == "allocation"
        else _other(actor, event.object_type, event.verb, before, after)
    )
    return sentence if sentence is not None else f"{actor}: {event.verb.replace('_', ' ')}"
