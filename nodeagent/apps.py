from __future__ import annotations

from django.apps import AppConfig


class NodeAgentConfig(AppConfig):
    """The portal's side of the node agent (``agent/``): credentials, ingest, latest state, history, freshness."""

    name = "nodeagent"
    verbose_name = "Node agents"
    default_auto_field = "django.db.models.BigAutoField"
