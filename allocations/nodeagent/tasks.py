"""Periodic jobs of the node-agent area (schedules in portal/celery.py): one service call each."""

from __future__ import annotations

from celery import shared_task

from allocations.nodeagent import services


@shared_task(soft_time_limit=60, time_limit=90)
def mark_silent_agents_task() -> list[str]:
    return services.mark_silent_agents()


@shared_task(soft_time_limit=240, time_limit=300)
def roll_up_agent_history_task() -> int:
    return services.roll_up_hours()


@shared_task(soft_time_limit=540, time_limit=600)
def prune_agent_history_task() -> dict[str, int]:
    result = services.prune_agent_history()
    return {"minutes": result.minutes, "hours": result.hours, "events": result.events}
