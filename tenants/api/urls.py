from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from tenants.api import views

router = SimpleRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("tokens", views.ApiTokenViewSet, basename="token")
router.register("sso-group-mappings", views.SsoGroupMappingViewSet, basename="sso-group-mapping")

urlpatterns = [path("me/", views.MeView.as_view(), name="me"), *router.urls]
