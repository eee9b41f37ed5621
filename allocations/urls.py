from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from allocations import booking_views, cluster_page, compaction_page, dashboard, queue_page, views, workload_views
from allocations.admission import page as admission_page
from allocations.cohorts import pages as cohort_pages
from allocations.namespaces import views as namespace_views
from allocations.planning import page as planning_page

urlpatterns: list[URLPattern | URLResolver] = [
    path("", views.home, name="home"),
    path("requests/new/", views.request_new, name="request-new"),
    path("requests/<int:allocation_id>/", views.request_detail, name="request-detail"),
    path("requests/<int:allocation_id>/release/", views.request_release, name="request-release"),
    path("requests/<int:allocation_id>/extend/", views.request_extend, name="request-extend"),
    path("requests/<int:allocation_id>/keep/", views.request_keep, name="request-keep"),
    path("requests/<int:allocation_id>/retry/", views.request_retry, name="request-retry"),
    path("requests/<int:allocation_id>/approve/", views.request_approve, name="request-approve"),
    path("requests/<int:allocation_id>/reject/", views.request_reject, name="request-reject"),
    path("extensions/<int:extension_id>/approve/", views.extension_approve, name="extension-approve"),
    path("extensions/<int:extension_id>/reject/", views.extension_reject, name="extension-reject"),
    path("approvals/", views.approvals, name="approvals"),
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/read/", views.inbox_read_all, name="inbox-read-all"),
    path("inbox/<int:notification_id>/read/", views.inbox_read, name="inbox-read"),
    path("quotas/", views.quotas, name="quotas"),
    path("dashboard/", dashboard.dashboard, name="dashboard"),
    path("dashboard/usage/", dashboard.usage, name="dashboard-usage"),
    path("dashboard/usage.csv", dashboard.usage_csv, name="dashboard-usage-csv"),
    path("dashboard/events/", dashboard.events, name="dashboard-events"),
    path("dashboard/pools/<int:pool_id>/summary/", dashboard.pool_summary, name="dashboard-pool-summary"),
    path("dashboard/pools/<int:pool_id>/nodes/", dashboard.pool_nodes, name="dashboard-pool-nodes"),
    path("dashboard/fleet/", dashboard.fleet, name="dashboard-fleet"),
    path("dashboard/nodes/<int:node_id>/", dashboard.node_slots, name="dashboard-node"),
    path("manage/pools/", views.manage_pools, name="manage-pools"),
    path("manage/fleet/", views.manage_fleet, name="manage-fleet"),
    path("manage/pools/<int:pool_id>/selector/", views.manage_pool_selector, name="manage-pool-selector"),
    # Admission (issue 14): allocations/admission/page.py.
    path("manage/pools/<int:pool_id>/admission/", admission_page.pool_admission, name="manage-pool-admission"),
    path("manage/quotas/", views.manage_quotas, name="manage-quotas"),
    path("manage/quota-changes/", views.manage_quota_changes, name="manage-quota-changes"),
    path(
        "manage/quota-changes/<int:change_id>/approve/", views.quota_change_approve, name="manage-quota-change-approve"
    ),
    path("manage/quota-changes/<int:change_id>/reject/", views.quota_change_reject, name="manage-quota-change-reject"),
    path("manage/cluster-check/", cluster_page.cluster_check, name="manage-cluster-check"),
    # --- advisor (issue 17) ---
    path(
        "requests/<int:allocation_id>/manifests.yaml",
        workload_views.request_manifests_download,
        name="request-manifests-download",
    ),
    # Compaction (issue 14): preview and apply.
    path("manage/pools/<int:pool_id>/compaction/", compaction_page.pool_compaction, name="manage-pool-compaction"),
    # What-if for planners (issue 14): allocations/planning/page.py.
    path("manage/pools/<int:pool_id>/what-if/", planning_page.pool_what_if, name="manage-pool-what-if"),
    # Bookings (issue 15).
    path("bookings/", booking_views.booking_list, name="bookings"),
    path("bookings/new/", booking_views.booking_new, name="booking-new"),
    path("bookings/<int:booking_id>/approve/", booking_views.booking_approve, name="booking-approve"),
    path("bookings/<int:booking_id>/reject/", booking_views.booking_reject, name="booking-reject"),
    path("bookings/<int:booking_id>/cancel/", booking_views.booking_cancel, name="booking-cancel"),
    path("bookings/consents/<int:consent_id>/agree/", booking_views.consent_agree, name="consent-agree"),
    path("bookings/consents/<int:consent_id>/refuse/", booking_views.consent_refuse, name="consent-refuse"),
    path("manage/bookings/", booking_views.booking_calendar, name="booking-calendar"),
    # The queue (issue 15): allocations/queue_page.py.
    path("requests/<int:allocation_id>/priority/", queue_page.request_priority, name="request-priority"),
    # Cohorts (issue 15): allocations/cohorts/pages.py, platform admins.
    path("manage/pools/<int:pool_id>/cohorts/", cohort_pages.pool_cohorts, name="manage-pool-cohorts"),
    path("manage/cohorts/<int:cohort_id>/", cohort_pages.cohort_edit, name="manage-cohort-edit"),
    path("manage/cohorts/<int:cohort_id>/delete/", cohort_pages.cohort_delete, name="manage-cohort-delete"),
    # Namespaces tenants own (issue 17): allocations/namespaces/views.py.
    path("tenants/<int:tenant_id>/namespaces/", namespace_views.tenant_namespaces, name="tenant-namespaces"),
    path(
        "tenants/<int:tenant_id>/namespaces/<int:namespace_id>/remove/",
        namespace_views.tenant_namespace_remove,
        name="tenant-namespace-remove",
    ),
]
