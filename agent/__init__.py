"""Fatia's node agent: one small process per GPU node (``python -m agent``).

It reads the node's GPUs through NVML (``pynvml``, package nvidia-ml-py) and reports to the portal's REST API
with a per-node credential: an inventory (GPUs, MIG profiles and placements, existing GPU and compute instances)
when it starts and when it changes, and telemetry every few seconds (memory and processes per MIG device,
utilisation where NVML gives it, ECC and Xid health events).

Nothing here imports Django: the agent ships in the same image as the portal but runs on its own.

* ``nvml``: the only module that calls NVML; dataclasses out, our own errors.
* ``fake_nvml``: a stand-in for the ``pynvml`` module with the real MIG placement rules, for tests and the demo
  (``FATIA_AGENT_FAKE_NVML=<scenario.json>``).
* ``payloads``: the JSON the portal receives.
* ``sender``: a thread that sends what the sampler buffers, with retry and capped back-off.
* ``config``, ``__main__``: settings from the environment and the main loop; ``gpu_check``: a read-only dump.
"""

from __future__ import annotations

AGENT_VERSION = "0.1.0"
