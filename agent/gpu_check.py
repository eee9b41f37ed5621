"""``deploy/gpu-check``: print this machine's GPUs as the agent would report them. Read-only.

It reads the inventory and two telemetry samples a second apart (GPM utilisation needs two), and prints them as
text or, with ``--json``, as the exact payloads the agent sends. It changes nothing: no MIG mode change, no
instance created or destroyed, no reset. ``--fake scenario.json`` runs it against :mod:`agent.fake_nvml`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from agent.nvml import Nvml, NvmlError
from agent.payloads import inventory_payload, telemetry_sample
from agent.runner import load_library


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the agent's inventory and telemetry payloads")
    parser.add_argument("--fake", metavar="SCENARIO", default="", help="use the fake NVML over this scenario file")
    parser.add_argument("--node", default="this-node", help="node name to put in the payloads")
    args = parser.parse_args(argv)
    try:
        nvml = Nvml(load_library(args.fake))
    except (NvmlError, OSError, ValueError, KeyError) as exc:
        sys.stderr.write(f"gpu-check: cannot read NVML: {exc}\n")
        return 1
    try:
        inventory = nvml.inventory()
        nvml.sample()
        time.sleep(0 if args.fake else 1.0)  # GPM needs two samples over an interval (>100 ms)
        sample = nvml.sample()
    except NvmlError as exc:
        sys.stderr.write(f"gpu-check: {exc}\n")
        return 1
    finally:
        nvml.close()
    if args.json:
        out = {
            "inventory": inventory_payload(args.node, inventory),
            "telemetry": telemetry_sample(1, time.time(), sample),
        }
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0
    lines = [f"driver {inventory.driver_version}, {len(inventory.gpus)} GPU(s)"]
    samples = {g.uuid: g for g in sample.gpus}
    for gpu in inventory.gpus:
        mig = {0: "off", 1: "on"}.get(gpu.mig_current, str(gpu.mig_current))
        pending = "" if gpu.mig_pending == gpu.mig_current else f" (pending {'on' if gpu.mig_pending else 'off'})"
        lines.append(f"gpu {gpu.index} minor {gpu.minor}: {gpu.product}, {gpu.memory_mib} MiB, {gpu.uuid}")
        lines.append(f"  MIG {mig}{pending}; utilisation source: {samples[gpu.uuid].utilisation_source}")
        for p in gpu.profiles:
            starts = ",".join(str(s) for s, _ in p.placements)
            size = p.placements[0][1] if p.placements else 0
            lines.append(
                f"  profile {p.name:<14} id {p.profile_id:>2}  slices {p.slice_count}  max {p.instance_count}  "
                f"{p.memory_mib} MiB  {p.sm_count} SMs  placements {{{starts}}}:{size}"
            )
        for gi in gpu.instances:
            for ci in gi.compute_instances or ():
                lines.append(f"  instance gi {gi.gi_id} ci {ci.ci_id}: {gi.profile} at {gi.start}:{gi.size} {ci.uuid}")
        for m in samples[gpu.uuid].mig:
            util = "n/a" if m.utilisation is None else f"{m.utilisation:.1f} %"
            lines.append(
                f"  usage {m.uuid}: {m.memory_used_mib}/{m.memory_total_mib} MiB, {m.processes} process(es), SM {util}"
            )
    for e in sample.events:
        lines.append(f"event {e.kind} {e.code} on {e.gpu_uuid}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
