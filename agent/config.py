"""The agent's settings, from the environment (the DaemonSet sets them; a ``*_FILE`` form reads a mounted secret).

| variable | default | |
| --- | --- | --- |
| ``FATIA_AGENT_PORTAL_URL`` | (required) | the portal's base URL, e.g. ``https://fatia.example.org`` |
| ``FATIA_AGENT_TOKEN`` (or ``_FILE``) | (required) | this node's credential (``manage.py agent_credential issue``) |
| ``FATIA_AGENT_BOOTSTRAP_TOKEN_FILE`` | (empty) | instead of a credential: the pod's projected ServiceAccount token, |
| | | traded for one at start and after a 401 (``agent/bootstrap.py``; the chart's DaemonSet) |
| ``FATIA_AGENT_NODE`` | ``NODE_NAME``, else the host name | the Kubernetes node name the credential is bound to |
| ``FATIA_AGENT_INTERVAL_S`` | 5 | seconds between telemetry samples |
| ``FATIA_AGENT_INVENTORY_S`` | 300 | the inventory is sent again this often even when unchanged |
| ``FATIA_AGENT_BUFFER`` | 720 | samples kept while the portal is unreachable (an hour at 5 s); older ones are dropped |
| ``FATIA_AGENT_BACKOFF_CAP_S`` | 60 | longest wait between two attempts to reach the portal |
| ``FATIA_AGENT_SEND_INTERVAL_S`` | 0 | 0 sends each sample at once; e.g. 30 batches six samples per request |
| ``FATIA_AGENT_FAKE_NVML`` | (empty) | a scenario file: use :mod:`agent.fake_nvml` instead of the GPU driver |
| ``FATIA_AGENT_COMMAND_POLL_S`` | 60 | seconds between two polls for MIG commands unless a telemetry answer asks |
| ``FATIA_AGENT_OUTBOX`` | (empty) | a file keeping unsent command results across restarts; empty: memory only |
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names it."""


@dataclass(frozen=True, slots=True)
class Config:
    portal_url: str
    token: str
    node: str
    interval_s: float
    inventory_s: float
    buffer: int
    backoff_cap_s: float
    fake_nvml: str
    send_interval_s: float = 0.0
    bootstrap_token_file: str = ""  # set (and `token` empty): the credential comes from agent.bootstrap
    command_poll_s: float = 60.0
    outbox: str = ""


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, not {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be greater than 0, not {raw!r}")
    return value


def _secret(env: Mapping[str, str], name: str) -> str:
    path = env.get(f"{name}_FILE", "").strip()
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE: cannot read {path}: {exc.strerror}") from None
    return env.get(name, "").strip()


def load_config(env: Mapping[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    url = env.get("FATIA_AGENT_PORTAL_URL", "").strip()
    if not url.startswith(("http://", "https://")):
        raise ConfigError("FATIA_AGENT_PORTAL_URL must be the portal's http:// or https:// URL")
    token = _secret(env, "FATIA_AGENT_TOKEN")
    bootstrap = "" if token else env.get("FATIA_AGENT_BOOTSTRAP_TOKEN_FILE", "").strip()
    if not token and not bootstrap:
        raise ConfigError(
            "FATIA_AGENT_TOKEN (or FATIA_AGENT_TOKEN_FILE) must hold this node's agent credential, or "
            "FATIA_AGENT_BOOTSTRAP_TOKEN_FILE name the pod's projected ServiceAccount token"
        )
    if bootstrap and not Path(bootstrap).is_file():
        raise ConfigError(f"FATIA_AGENT_BOOTSTRAP_TOKEN_FILE: no token file at {bootstrap}")
    node = env.get("FATIA_AGENT_NODE", "").strip() or env.get("NODE_NAME", "").strip() or socket.gethostname()
    fake = env.get("FATIA_AGENT_FAKE_NVML", "").strip()
    if fake and not Path(fake).is_file():
        raise ConfigError(f"FATIA_AGENT_FAKE_NVML: no scenario file at {fake}")
    return Config(
        portal_url=url,
        token=token,
        node=node,
        interval_s=_positive(env, "FATIA_AGENT_INTERVAL_S", 5.0),
        inventory_s=_positive(env, "FATIA_AGENT_INVENTORY_S", 300.0),
        buffer=int(_positive(env, "FATIA_AGENT_BUFFER", 720)),
        backoff_cap_s=_positive(env, "FATIA_AGENT_BACKOFF_CAP_S", 60.0),
        fake_nvml=fake,
        bootstrap_token_file=bootstrap,
        send_interval_s=_positive(env, "FATIA_AGENT_SEND_INTERVAL_S", 0.0)
        if env.get("FATIA_AGENT_SEND_INTERVAL_S", "").strip() not in ("", "0")
        else 0.0,
        command_poll_s=_positive(env, "FATIA_AGENT_COMMAND_POLL_S", 60.0),
        outbox=env.get("FATIA_AGENT_OUTBOX", "").strip(),
    )
