"""The agent's payloads (``agent/payloads.py``), validated with bounds: a malformed or oversized report is a 400
with a message per field, never a 500 and never a partial write."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

MAX_GPUS = 16
MAX_MIG_DEVICES = 8  # 7 on every MIG GPU so far
MAX_SAMPLES = 120  # ten minutes of 5-second samples per request; the agent sends 60
MAX_EVENTS = 64
MAX_INT = 2**31 - 1  # what the integer columns hold
MAX_BIG = 2**62
UUID_LENGTH = 64


class _Strict(serializers.Serializer[Any]):
    """Unknown keys are an error: a typo in an agent must not pass silently."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, dict) else []
        if unknown:
            raise serializers.ValidationError({k: ["Unknown field."] for k in unknown})
        return super().to_internal_value(data)


class MigMode(_Strict):
    current = serializers.IntegerField(min_value=0, max_value=1)
    pending = serializers.IntegerField(min_value=0, max_value=1)


class Profile(_Strict):
    name = serializers.CharField(max_length=32)
    id = serializers.IntegerField(min_value=0, max_value=255)
    slices = serializers.IntegerField(min_value=1, max_value=16)
    instances = serializers.IntegerField(min_value=0, max_value=16)
    memory_mib = serializers.IntegerField(min_value=0)
    sm = serializers.IntegerField(min_value=0)
    placements = serializers.ListField(
        child=serializers.ListField(
            child=serializers.IntegerField(min_value=0, max_value=64), min_length=2, max_length=2
        ),
        max_length=16,
    )


class ComputeInstance(_Strict):
    ci = serializers.IntegerField(min_value=0)
    uuid = serializers.CharField(allow_blank=True, max_length=UUID_LENGTH)


class GpuInstance(_Strict):
    gi = serializers.IntegerField(min_value=0)
    profile_id = serializers.IntegerField(min_value=0, max_value=255)
    profile = serializers.CharField(max_length=32)
    start = serializers.IntegerField(min_value=0, max_value=64)
    size = serializers.IntegerField(min_value=1, max_value=64)
    cis = serializers.ListField(child=ComputeInstance(), max_length=MAX_MIG_DEVICES)


class InventoryGpu(_Strict):
    uuid = serializers.CharField(max_length=UUID_LENGTH)
    index = serializers.IntegerField(min_value=0, max_value=255)
    minor = serializers.IntegerField(min_value=0, max_value=255)
    product = serializers.CharField(max_length=100)
    memory_mib = serializers.IntegerField(min_value=0)
    mig = MigMode()
    profiles = serializers.ListField(child=Profile(), max_length=32)
    instances = serializers.ListField(child=GpuInstance(), max_length=MAX_MIG_DEVICES)


class InventoryIn(_Strict):
    node = serializers.CharField(max_length=253)
    agent_version = serializers.CharField(max_length=32)
    driver_version = serializers.CharField(max_length=64, allow_blank=True)
    gpus = serializers.ListField(child=InventoryGpu(), max_length=MAX_GPUS)


class MigSample(_Strict):
    uuid = serializers.CharField(max_length=UUID_LENGTH)
    gi = serializers.IntegerField(min_value=0)
    profile = serializers.CharField(max_length=32)
    start = serializers.IntegerField(min_value=0, max_value=64)
    mem = serializers.IntegerField(min_value=0, max_value=MAX_INT)
    total = serializers.IntegerField(min_value=0, max_value=MAX_INT)
    procs = serializers.IntegerField(min_value=0, max_value=100_000)
    util = serializers.FloatField(min_value=0, max_value=100, allow_null=True)


class GpuSample(_Strict):
    uuid = serializers.CharField(max_length=UUID_LENGTH)
    mem = serializers.IntegerField(min_value=0, max_value=MAX_INT, allow_null=True)
    util = serializers.FloatField(min_value=0, max_value=100, allow_null=True)
    src = serializers.ChoiceField(choices=["gpm", "device", "none"])
    ecc = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_BIG, allow_null=True), min_length=2, max_length=2
    )
    mig = serializers.ListField(child=MigSample(), max_length=MAX_MIG_DEVICES)


class Event(_Strict):
    gpu = serializers.CharField(max_length=UUID_LENGTH)
    kind = serializers.ChoiceField(choices=["xid", "ecc"])
    code = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    gi = serializers.IntegerField(min_value=0, max_value=MAX_INT, allow_null=True)
    ci = serializers.IntegerField(min_value=0, max_value=MAX_INT, allow_null=True)


class Sample(_Strict):
    seq = serializers.IntegerField(min_value=1, max_value=MAX_BIG)
    ts = serializers.FloatField(min_value=0, max_value=4_102_444_800)  # seconds since 1970, before 2100
    gpus = serializers.ListField(child=GpuSample(), max_length=MAX_GPUS)
    events = serializers.ListField(child=Event(), max_length=MAX_EVENTS)


class TelemetryIn(_Strict):
    node = serializers.CharField(max_length=253)
    boot = serializers.CharField(max_length=32)
    dropped = serializers.IntegerField(min_value=0, max_value=MAX_BIG)
    samples = serializers.ListField(child=Sample(), min_length=1, max_length=MAX_SAMPLES)


class IngestOut(serializers.Serializer[Any]):
    accepted = serializers.IntegerField()
    duplicates = serializers.IntegerField()


class TelemetryOut(IngestOut):
    commands = serializers.IntegerField(help_text="MIG commands waiting for this node: non-zero, list them now.")


class TelemetryQueuedOut(serializers.Serializer[Any]):
    queued = serializers.IntegerField(help_text="Samples queued; applied within seconds, each once.")
    commands = serializers.IntegerField(help_text="1 when MIG commands wait for this node: list them now.")


class AgentCredentialOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    node = serializers.CharField(source="node.name")
    prefix = serializers.CharField()
    origin = serializers.CharField(help_text="admin, or bootstrap (from an agent pod's ServiceAccount token).")
    created_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)


class AgentCredentialCreated(AgentCredentialOut):
    token = serializers.CharField(help_text="Shown once; the portal keeps only its digest.")


class AgentCredentialIn(serializers.Serializer[Any]):
    node = serializers.CharField(max_length=253)


class BootstrapIn(_Strict):
    """An agent asks for its node's credential with the ServiceAccount token the kubelet projected into its pod."""

    node = serializers.RegexField(
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        max_length=253,
        error_messages={"invalid": "A Kubernetes node name (lower-case letters, digits, '-' and '.')."},
    )
    # A projected token is a JWT of one or two KB; the bound keeps a caller from handing the API server megabytes.
    token = serializers.CharField(max_length=16384)


class BootstrapOut(serializers.Serializer[Any]):
    node = serializers.CharField(source="node.name")
    prefix = serializers.CharField()
    token = serializers.CharField(help_text="This node's agent credential; shown once, the portal keeps its digest.")


# --- MIG operations for the agent (allocations/nodeagent/commands.py) ----------------------------------------------


class CommandsQuery(serializers.Serializer[Any]):
    node = serializers.CharField(max_length=253, help_text="This agent's node (its credential's).")


class CommandOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    gpu_index = serializers.IntegerField()
    action = serializers.ChoiceField(choices=["create", "destroy"])
    profile = serializers.CharField()
    start = serializers.IntegerField(help_text="The GPU instance's first memory slice (its placement start).")
    batch_key = serializers.CharField(help_text="Commands of one batch run in list order; a failure stops it.")


class CommandsOut(serializers.Serializer[Any]):
    commands = CommandOut(many=True, help_text="Commands awaiting a result, in the order to run them.")


class CommandResultIn(_Strict):
    node = serializers.CharField(max_length=253)
    ok = serializers.BooleanField()
    gi_id = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False, allow_null=True)
    ci_id = serializers.IntegerField(min_value=0, max_value=MAX_INT, required=False, allow_null=True)
    mig_uuid = serializers.CharField(max_length=UUID_LENGTH, required=False, allow_blank=True)
    error = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    code = serializers.CharField(max_length=64, required=False, allow_blank=True, help_text="NVML's error name.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A create reports its instance (gi_id, ci_id, mig_uuid); a destroy reports the instance it removed, or
        # none when there was nothing to remove. A failure says what failed.
        if attrs["ok"] and attrs.get("ci_id") is not None and attrs.get("gi_id") is None:
            raise serializers.ValidationError({"gi_id": ["Required with ci_id."]})
        if not attrs["ok"] and not attrs.get("error"):
            raise serializers.ValidationError({"error": ["Say what failed when ok is false."]})
        return attrs


class CommandStateOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["pending", "running", "done", "failed", "cancelled"])
    batch_key = serializers.CharField()
