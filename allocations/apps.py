from __future__ import annotations

from django.apps import AppConfig


class AllocationsConfig(AppConfig):
    name = "allocations"
    verbose_name = "Pools, quotas and slice allocations"
