from __future__ import annotations

from rest_framework.routers import SimpleRouter

from allocations.api import views
from allocations.api.bookings import BookingViewSet

router = SimpleRouter()
router.register("pools", views.PoolViewSet, basename="pool")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("quota-changes", views.QuotaChangeViewSet, basename="quota-change")
router.register("allocations", views.AllocationViewSet, basename="allocation")
router.register("lease-extensions", views.LeaseExtensionViewSet, basename="lease-extension")
router.register("audit-events", views.AuditEventViewSet, basename="audit-event")
# Bookings (issue 15).
router.register("bookings", BookingViewSet, basename="booking")

urlpatterns = router.urls
