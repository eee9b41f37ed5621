from __future__ import annotations

from django.apps import AppConfig


class NodeAgentConfig(AppConfig):
    """The portal's side of the node agent (``agent/``): credentials, ingest, latest state, history, freshness."""

    name = "allocations.nodeagent"
    # The label the tables and migrations were made with (nodeagent_*), kept when the app moved into allocations/.
    label = "nodeagent"
    verbose_name = "Node agents"
    default_auto_field = "django.db.models.BigAutoField"
