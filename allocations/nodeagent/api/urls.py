from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from allocations.nodeagent.api import views

router = SimpleRouter()
router.register("agent-credentials", views.AgentCredentialViewSet, basename="agent-credential")

urlpatterns = [
    path("agent/inventory/", views.InventoryView.as_view(), name="agent-inventory"),
    path("agent/telemetry/", views.TelemetryView.as_view(), name="agent-telemetry"),
    path("agent/bootstrap/", views.BootstrapView.as_view(), name="agent-bootstrap"),
    path("agent/commands/", views.CommandListView.as_view(), name="agent-commands"),
    path("agent/commands/<int:pk>/result/", views.CommandResultView.as_view(), name="agent-command-result"),
    *router.urls,
]
