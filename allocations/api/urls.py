from __future__ import annotations

from rest_framework.routers import SimpleRouter

from allocations.api import cohorts, compaction, namespaces, queue, views, whatif, workloads
from allocations.api.bookings import BookingViewSet

router = SimpleRouter()
router.register("pools", views.PoolViewSet, basename="pool")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("quota-changes", views.QuotaChangeViewSet, basename="quota-change")
router.register("allocations", views.AllocationViewSet, basename="allocation")
router.register("lease-extensions", views.LeaseExtensionViewSet, basename="lease-extension")
router.register("extension-consents", views.ExtensionConsentViewSet, basename="extension-consent")
router.register("audit-events", views.AuditEventViewSet, basename="audit-event")
# --- advisor (issue 17): manifests and attach for a request's claims; the right-sizing advisor ---
router.register("allocations", workloads.WorkloadViewSet, basename="allocation-workload")
router.register("advice", workloads.AdviceViewSet, basename="advice")
# Compaction (issue 14): platform admins only.
router.register("move-plans", compaction.MovePlanViewSet, basename="move-plan")
# Bookings (issue 15).
router.register("bookings", BookingViewSet, basename="booking")
# The queue (issue 15): allocations/api/queue.py.
router.register("queue", queue.QueueViewSet, basename="queue")
# --- namespaces (issue 17): the namespaces tenants own; platform admins assign and remove them ---
router.register("namespaces", namespaces.NamespaceViewSet, basename="namespace")
# --- cohorts (issue 15): allocations/api/cohorts.py; joining one is PATCH /quotas/<id>/ ---
router.register("cohorts", cohorts.CohortViewSet, basename="cohort")
# --- what-if for planners (issue 14): allocations/api/whatif.py ---
router.register("pools", whatif.WhatIfViewSet, basename="pool-what-if")

urlpatterns = router.urls
