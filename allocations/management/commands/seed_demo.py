"""Seed the zero-setup demo: users, two tenants, H100 and H200 pools with a simulated fleet,
quotas, and requests in every state. Idempotent: a second run changes nothing."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from allocations import services
from allocations.admission.hold import Hold
from allocations.management.demo import require_demo_settings
from allocations.models import Allocation, NodePool
from allocations.services.admission import hold_allocation
from allocations.services.queue import admit_queued
from tenants.models import AuditEvent, Membership, Tenant
from tenants.services import add_member, create_tenant

DEMO_USERS = [
    ("admin", True, "Platform admin"),
    ("alice", False, "Member of ML Research"),
    ("mallory", False, "Manager of ML Research"),
    ("charlie", False, "Member of Inference"),
    ("dana", False, "Manager of Inference"),
]
FLEET = [
    ("H100 80GB", "h100", "NVIDIA H100 80GB HBM3", 6),
    ("H200 141GB", "h200", "NVIDIA H200", 3),
]
# Issue 13: whole L4 GPUs shared by memory size (time-sliced), 2 nodes of 4.
SHARED_FLEET = [("L4 shared", "l4-shared", "NVIDIA L4", 2, 4)]
# Issue 14: how long the demo's ended hold lasted (its request's "Hold" line).
HELD_FOR = timedelta(minutes=15)


class Command(BaseCommand):
    help = "Create demo users, tenants, pools, a simulated fleet and some requests (idempotent)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--credentials-file", help="Write the demo logins to this file.")

    def handle(self, *args: Any, **options: Any) -> None:
        # It creates users whose passwords it prints: only ever on the demo's own database.
        require_demo_settings("seed_demo")
        if Tenant.objects.filter(slug="ml-research").exists():
            self.stdout.write("Demo data already present.")
            return
        logins = self._seed()
        lines = [f"{name:8s} {password}  ({role})" for name, password, role in logins]
        if options.get("credentials_file"):
            with open(options["credentials_file"], "w") as fh:
                fh.write("\n".join(lines) + "\n")
        self.stdout.write("Demo logins (user, password):\n  " + "\n  ".join(lines))

    @transaction.atomic
    def _seed(self) -> list[tuple[str, str, str]]:
        logins = []
        users: dict[str, User] = {}
        for name, staff, role in DEMO_USERS:
            password = secrets.token_urlsafe(9)
            user = User.objects.create_user(
                username=name, email=f"{name}@example.test", password=password, is_staff=staff
            )
            users[name] = user
            logins.append((name, password, role))
        admin = users["admin"]
        research = create_tenant(name="ML Research", slug="ml-research", actor=admin, auto_approve_max_compute_slices=3)
        inference = create_tenant(name="Inference", slug="inference", actor=admin, max_lease_hours=720)
        for tenant, member, manager in ((research, "alice", "mallory"), (inference, "charlie", "dana")):
            add_member(tenant_id=tenant.pk, username=member, role=Membership.Role.MEMBER, actor=admin)
            add_member(tenant_id=tenant.pk, username=manager, role=Membership.Role.MANAGER, actor=admin)
        pools: dict[str, NodePool] = {}
        for name, slug, model, nodes in FLEET:
            pool = services.create_node_pool(name=name, slug=slug, gpu_model=model, actor=admin)
            pools[slug] = pool
            for n in range(nodes):
                services.register_node(pool_id=pool.pk, name=f"{slug}-node-{n:02d}", gpu_count=8, actor=admin)
            for tenant in (research, inference):
                services.set_tenant_quota(
                    tenant_id=tenant.pk,
                    pool_id=pool.pk,
                    compute_slices_limit=56,
                    memory_slices_limit=64,
                    actor=admin,
                    profile_caps={},
                )
        for name, slug, model, nodes, gpus in SHARED_FLEET:
            pool = services.create_node_pool(name=name, slug=slug, gpu_model=model, kind="shared", actor=admin)
            pools[slug] = pool
            for n in range(nodes):
                services.register_node(pool_id=pool.pk, name=f"{slug}-node-{n:02d}", gpu_count=gpus, actor=admin)
            for tenant in (research, inference):
                # 4 GPUs' worth: 400 % of a GPU and 96 GiB (allocations/sharing/units.py)
                services.set_tenant_quota(
                    tenant_id=tenant.pk, pool_id=pool.pk, compute_slices_limit=400, memory_slices_limit=96, actor=admin
                )
        self._requests(users, research, inference, pools)
        return logins

    def _requests(
        self, users: dict[str, User], research: Tenant, inference: Tenant, pools: dict[str, NodePool]
    ) -> None:
        def ask(user: str, tenant: Tenant, pool: str, profile: str, count: int, purpose: str) -> Allocation:
            allocation, _ = services.request_allocation(
                tenant_id=tenant.pk,
                pool_id=pools[pool].pk,
                profile=profile,
                count=count,
                lease_hours=24,
                purpose=purpose,
                actor=users[user],
            )
            return allocation

        active = []
        for profile, count, purpose in [
            ("1g.10gb", 2, "Notebook experiments"),
            ("2g.20gb", 1, "Tokenizer benchmarks"),
            ("1g.20gb", 1, "Evaluation harness"),
        ]:
            allocation = ask("alice", research, "h100", profile, count, purpose)
            self._provision(allocation)
            active.append(allocation)
        first_active = active[0]
        for profile, count, purpose in [("3g.40gb", 2, "Llama 3.1 8B serving"), ("1g.10gb", 3, "Embeddings")]:
            allocation = ask("charlie", inference, "h100", profile, count, purpose)
            if allocation.status == Allocation.Status.PENDING:
                services.approve_allocation(allocation_id=allocation.pk, actor=users["dana"], reason="Planned launch")
            self._provision(allocation)
        self._provision(ask("charlie", inference, "h200", "3g.71gb", 1, "Long-context eval"))
        self._ended_hold(ask("charlie", inference, "h200", "1g.18gb", 1, "Quantised model smoke test"), users)
        ask("alice", research, "h100", "7g.80gb", 1, "Full-GPU fine-tune of an 8B model")
        ask("alice", research, "h200", "4g.71gb", 1, "Distillation run")
        for user, tenant, mib, count, purpose in [
            ("alice", research, 6144, 2, "Notebook on an L4 share"),
            ("charlie", inference, 8192, 1, "Small-model inference"),
            ("alice", research, 4096, 1, "Batch embeddings"),
        ]:
            share, _ = services.request_allocation(
                tenant_id=tenant.pk,
                pool_id=pools["l4-shared"].pk,
                profile="",
                memory_mib=mib,
                count=count,
                lease_hours=24,
                purpose=purpose,
                actor=users[user],
            )
            if share.status == Allocation.Status.PENDING:
                manager = "mallory" if tenant == research else "dana"
                services.approve_allocation(allocation_id=share.pk, actor=users[manager], reason="Demo")
            self._provision(share)
        rejected = ask("alice", research, "h100", "4g.40gb", 2, "Hyper-parameter sweep")
        services.reject_allocation(allocation_id=rejected.pk, actor=users["mallory"], reason="Use 2g slices for sweeps")
        # An active lease of 24 h that alice wants twice as long: past the 24 h that apply at once, so it
        # waits on mallory's Approvals page.
        services.request_lease_extension(allocation_id=first_active.pk, hours=24, actor=users["alice"])
        withdrawn = ask("alice", research, "h100", "3g.40gb", 2, "Batch inference test")
        services.release_allocation(allocation_id=withdrawn.pk, actor=users["alice"])
        released = ask("alice", research, "h100", "1g.10gb", 1, "Quick smoke test")
        self._provision(released)
        services.release_allocation(allocation_id=released.pk, actor=users["alice"])
        services.finish_release(allocation_id=released.pk)

    def _ended_hold(self, allocation: Allocation, users: dict[str, User]) -> None:
        """The H200 pool holds requests (issue 14), and this one's hold has ended, so its page shows the "Hold" line:
        held 15 minutes ago, then placed at its deadline by the admission pass. The hold is the demo's history (a
        fresh demo pool has no demand that would make its policy hold), written by the service a placement step
        calls; the pass that ends it is the real one."""
        pool = services.update_node_pool(
            pool_id=allocation.pool_id, admission=NodePool.Admission.HOLD, actor=users["admin"]
        )
        if allocation.status == Allocation.Status.PENDING:
            services.approve_allocation(allocation_id=allocation.pk, actor=users["dana"], reason="Demo")
        hold_allocation(
            allocation, pool=pool, what=f"1 x {allocation.profile}", hold=Hold(until=timezone.now(), stranded=2.0)
        )
        # Its history so far moved HELD_FOR back: asked, approved and held a quarter of an hour ago.
        Allocation.objects.filter(pk=allocation.pk).update(
            created_at=F("created_at") - HELD_FOR,
            decided_at=F("decided_at") - HELD_FOR,
            queued_at=F("queued_at") - HELD_FOR,
        )
        AuditEvent.objects.filter(object_type="allocation", object_id=str(allocation.pk)).update(
            created_at=F("created_at") - HELD_FOR
        )
        admit_queued(pool_id=pool.pk)  # past its deadline: placed forced (hold_outcome "forced")

    def _provision(self, allocation: Allocation) -> None:
        # The embedded worker would do this after commit; inside this one seeding transaction, do it now.
        services.provision_allocation(allocation_id=allocation.pk)
