"""What node agents report, as the dashboard reads it.

* :class:`AgentCredential`: one node's secret, hashed at rest, shown once, revocable; it reports for that node only.
* :class:`AgentStatus`: one row per node with an agent: when it last reported (freshness), its latest inventory.
* :class:`DeviceState`: the latest figures per GPU and per MIG device, plus the running sums of the current minute.
* :class:`DeviceRollup`: history, one row per device per minute (kept 7 days) and per hour (kept 90 days).
* :class:`HealthEvent`: Xid and ECC events (kept 90 days).
* :class:`AgentCommand`: a MIG operation (create or destroy one GPU instance) the portal asks a node's agent to
  apply, and its outcome (static-MIG agent mode; services in ``allocations/nodeagent/commands.py``).

Fleet rows (Node, Gpu) belong to ``allocations``; these tables point at them and never change them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from allocations.models import Gpu, Node


class AgentCredential(models.Model):
    """A node agent's credential. The token is ``fagent_<prefix>_<secret>``; only the SHA-256 digest of the whole
    string is stored, `prefix` finds the row. Bound to one node: it may report for that node only.
    Revoked credentials stay (audit) with `revoked_at` set; issue and revoke go through
    ``allocations.nodeagent.services``; `origin` bootstrap ones come from ``allocations.nodeagent.bootstrap``
    (a ServiceAccount token the cluster vouched for), and each new one revokes the node's previous one."""

    class Origin(models.TextChoices):
        ADMIN = "admin", "Issued by an admin"
        BOOTSTRAP = "bootstrap", "Bootstrapped from a ServiceAccount token"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_credentials")
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.ADMIN)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node__name", "-created_at"]

    def __str__(self) -> str:
        return f"agent credential {self.prefix} for {self.node_id}"


class AgentStatus(models.Model):
    """One node's agent as last heard. `last_seen_at` drives freshness (a node silent past
    FATIA_AGENT_SILENT_AFTER_S is marked agent-silent); (`boot`, `last_seq`) make a resent telemetry batch harmless.
    `inventory` is the agent's latest inventory payload (GPUs, profiles, placements, instances)."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="agent_status")
    last_seen_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=32, blank=True)
    driver_version = models.CharField(max_length=64, blank=True)
    inventory = models.JSONField(default=dict, blank=True)
    inventory_at = models.DateTimeField(null=True, blank=True)
    boot = models.CharField(max_length=32, blank=True)
    last_seq = models.BigIntegerField(default=0)
    dropped = models.BigIntegerField(default=0, help_text="Samples the agent's buffer dropped since it started.")

    def __str__(self) -> str:
        return f"agent on node {self.node_id}"


class DeviceState(models.Model):
    """The latest figures of one GPU (`kind` gpu) or MIG device (`kind` mig), and the current minute's sums.

    `gpu` is the portal's GPU row matched by UUID or minor number (None if the portal does not know the GPU).
    For a MIG device, `start`/`size`/`profile` say which slot it holds: the dashboard joins slices on (gpu, start).
    `utilisation` is SM utilisation in percent where NVML gives it (GPM per GPU instance on Hopper and later; whole
    GPU with MIG off); `utilisation_source` says which ("gpm", "device", "none").
    """

    class Kind(models.TextChoices):
        GPU = "gpu", "GPU"
        MIG = "mig", "MIG device"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    gpu = models.ForeignKey(Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    kind = models.CharField(max_length=3, choices=Kind.choices)
    uuid = models.CharField(max_length=64)
    gpu_uuid = models.CharField(max_length=64)
    profile = models.CharField(max_length=32, blank=True)
    start = models.PositiveSmallIntegerField(null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)
    memory_total_mib = models.PositiveIntegerField(null=True, blank=True)
    processes = models.PositiveIntegerField(default=0)
    utilisation = models.FloatField(null=True, blank=True)
    utilisation_source = models.CharField(max_length=8, blank=True)
    ecc_uncorrected = models.BigIntegerField(null=True, blank=True)
    sampled_at = models.DateTimeField()
    # The minute being summed; flushed into a DeviceRollup when a sample of a later minute arrives.
    minute = models.DateTimeField()
    minute_samples = models.PositiveIntegerField(default=0)
    minute_memory_sum = models.BigIntegerField(default=0)
    minute_memory_max = models.PositiveIntegerField(default=0)
    minute_util_sum = models.FloatField(default=0.0)
    minute_util_samples = models.PositiveIntegerField(default=0)
    minute_util_max = models.FloatField(default=0.0)
    minute_processes_max = models.PositiveIntegerField(default=0)

    class Meta:
        # Per node: a credential speaks for its own node only, so a UUID another node reports cannot collide.
        constraints = [models.UniqueConstraint(fields=["node", "uuid"], name="device_state_unique_node_uuid")]
        indexes = [models.Index(fields=["node", "kind"]), models.Index(fields=["gpu", "start"])]

    def __str__(self) -> str:
        return self.uuid


class DeviceRollup(models.Model):
    """One device over one minute or one hour: sample count, mean and peak memory and utilisation, peak processes.

    Minutes come from ingest (a device's minute is written once, when the next minute starts); hours are rebuilt
    from minutes by the retention task. Kept FATIA_AGENT_MINUTES_KEPT_DAYS (7) and FATIA_AGENT_HOURS_KEPT_DAYS (90).
    """

    class Resolution(models.TextChoices):
        MINUTE = "minute", "Minute"
        HOUR = "hour", "Hour"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    uuid = models.CharField(max_length=64)
    kind = models.CharField(max_length=3, choices=DeviceState.Kind.choices)
    resolution = models.CharField(max_length=6, choices=Resolution.choices)
    bucket = models.DateTimeField()
    samples = models.PositiveIntegerField()
    memory_mean_mib = models.FloatField()
    memory_max_mib = models.PositiveIntegerField()
    utilisation_mean = models.FloatField(null=True, blank=True)
    utilisation_max = models.FloatField(null=True, blank=True)
    processes_max = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["node", "uuid", "resolution", "bucket"], name="device_rollup_unique_bucket"
            ),
        ]
        indexes = [models.Index(fields=["resolution", "bucket"])]

    def __str__(self) -> str:
        return f"{self.uuid} {self.resolution} {self.bucket:%Y-%m-%d %H:%M}"


class HealthEvent(models.Model):
    """An Xid error or new uncorrected ECC errors on one GPU, as the node's agent reported it."""

    class Kind(models.TextChoices):
        XID = "xid", "Xid"
        ECC = "ecc", "Uncorrected ECC"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    gpu_uuid = models.CharField(max_length=64)
    kind = models.CharField(max_length=3, choices=Kind.choices)
    code = models.PositiveIntegerField()
    gpu_instance = models.PositiveIntegerField(null=True, blank=True)
    compute_instance = models.PositiveIntegerField(null=True, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["node", "at"]), models.Index(fields=["at"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.code} on {self.gpu_uuid}"


class AgentCommand(models.Model):
    """One MIG operation for one node's agent: create ``profile`` at memory slot ``start`` on GPU ``gpu_index``, or
    destroy the GPU instance there.

    Commands of one ``batch_key`` (the caller's reference, e.g. ``reconfiguration:<id>``) run in ``sequence``
    order; ``sequence`` counts up per node. Status moves pending -> running (handed to the agent) -> done or
    failed; a failure cancels the batch's later commands, and ``cancel_agent_batch`` cancels those not yet handed
    out. ``result`` holds what the agent reported on success (gi_id, ci_id, mig_uuid); ``error`` and ``code`` (the
    NVML error name, e.g. NVML_ERROR_INSUFFICIENT_RESOURCES) a failure. Rows change only through
    ``allocations.nodeagent.commands``."""

    class Action(models.TextChoices):
        CREATE = "create", "Create"
        DESTROY = "destroy", "Destroy"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    gpu_index = models.PositiveSmallIntegerField()
    sequence = models.PositiveBigIntegerField()
    action = models.CharField(max_length=8, choices=Action.choices)
    profile = models.CharField(max_length=32)
    start = models.PositiveSmallIntegerField()
    batch_key = models.CharField(max_length=64)
    status = models.CharField(max_length=9, choices=Status.choices, default=Status.PENDING)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    code = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_id", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["node", "sequence"], name="agent_command_unique_node_sequence"),
        ]
        indexes = [models.Index(fields=["node", "status"]), models.Index(fields=["batch_key"])]

    def __str__(self) -> str:
        return f"{self.action} {self.profile}@{self.start} on GPU {self.gpu_index} ({self.status})"
