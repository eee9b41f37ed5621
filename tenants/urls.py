from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from tenants import idle_views, views
from tenants.signin import SignInView
from tenants.sso import views as sso_views
from tenants.sso.oidc import OidcAuthenticateView, OidcCallbackView

urlpatterns = [
    path("favicon.ico", views.favicon, name="favicon"),
    path("api/v1/redoc/redoc.standalone.js", views.redoc_bundle, name="redoc-bundle"),
    path("login/", SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("oidc/authenticate/", OidcAuthenticateView.as_view(), name="oidc-authenticate"),
    path("oidc/callback/", OidcCallbackView.as_view(), name="oidc-callback"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke, name="tokens-revoke"),
    path("tenants/<int:tenant_id>/idle-reclaim/", idle_views.idle_reclaim, name="tenant-idle-reclaim"),
    path("manage/tenants/", views.manage_tenants, name="manage-tenants"),
    path("manage/tenants/<int:tenant_id>/", views.manage_tenant, name="manage-tenant"),
    path("manage/tenants/<int:tenant_id>/members/", views.member_add, name="manage-member-add"),
    path("manage/memberships/<int:membership_id>/role/", views.member_role, name="manage-member-role"),
    path("manage/memberships/<int:membership_id>/remove/", views.member_remove, name="manage-member-remove"),
    path("manage/audit/", views.audit_log, name="manage-audit"),
    path("manage/sso/", sso_views.manage_sso, name="manage-sso"),
    path("manage/sso/<int:mapping_id>/role/", sso_views.sso_mapping_role, name="manage-sso-role"),
    path("manage/sso/<int:mapping_id>/remove/", sso_views.sso_mapping_remove, name="manage-sso-remove"),
]
