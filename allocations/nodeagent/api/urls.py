from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from allocations.nodeagent.api import telemetry as telemetry_view
from allocations.nodeagent.api import views

# The hot path is a plain view; the schema generator reads TelemetryView's declaration for it.
telemetry = telemetry_view.telemetry
telemetry.cls = views.TelemetryView  # type: ignore[attr-defined]
telemetry.initkwargs = {}  # type: ignore[attr-defined]

router = SimpleRouter()
router.register("agent-credentials", views.AgentCredentialViewSet, basename="agent-credential")

urlpatterns = [
    path("agent/inventory/", views.InventoryView.as_view(), name="agent-inventory"),
    path("agent/telemetry/", telemetry, name="agent-telemetry"),
    path("agent/bootstrap/", views.BootstrapView.as_view(), name="agent-bootstrap"),
    path("agent/commands/", views.CommandListView.as_view(), name="agent-commands"),
    path("agent/commands/<int:pk>/result/", views.CommandResultView.as_view(), name="agent-command-result"),
    *router.urls,
]
