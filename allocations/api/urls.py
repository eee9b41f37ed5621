from __future__ import annotations

from rest_framework.routers import SimpleRouter

from allocations.api import queue, views

router = SimpleRouter()
router.register("pools", views.PoolViewSet, basename="pool")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("quota-changes", views.QuotaChangeViewSet, basename="quota-change")
router.register("allocations", views.AllocationViewSet, basename="allocation")
router.register("lease-extensions", views.LeaseExtensionViewSet, basename="lease-extension")
router.register("audit-events", views.AuditEventViewSet, basename="audit-event")
# The queue (issue 15): allocations/api/queue.py.
router.register("queue", queue.QueueViewSet, basename="queue")

urlpatterns = router.urls
