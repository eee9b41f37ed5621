"""``python -m agent``: the node agent (settings in ``agent/config.py``)."""

from __future__ import annotations

import logging
import signal
import sys
import threading

from agent.bootstrap import BootstrapTransport
from agent.commands import CommandPoller
from agent.config import ConfigError, load_config
from agent.nvml import Nvml, NvmlError
from agent.outbox import Outbox
from agent.runner import Agent, load_library, new_boot_id
from agent.sender import HttpTransport, Sender, Transport


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config()
    except ConfigError as exc:
        sys.stderr.write(f"fatia agent: {exc}\n")
        return 2
    try:
        nvml = Nvml(load_library(config.fake_nvml))
    except NvmlError as exc:
        sys.stderr.write(f"fatia agent: cannot initialise NVML: {exc}\n")
        return 1
    transport: Transport = (
        HttpTransport(config.portal_url, config.token)
        if config.token
        else BootstrapTransport(config.portal_url, config.node, config.bootstrap_token_file)
    )
    sender = Sender(
        transport=transport,
        node=config.node,
        boot=new_boot_id(),
        capacity=config.buffer,
        backoff_cap_s=config.backoff_cap_s,
        send_interval_s=config.send_interval_s,
        outbox=Outbox(config.outbox or None),
    )
    agent = Agent(nvml=nvml, sender=sender, node=config.node, inventory_s=config.inventory_s)
    poller = CommandPoller(
        transport=transport,
        node=config.node,
        outbox=sender.outbox,
        hand_over=agent.offer_commands,
        interval_s=config.command_poll_s,
        backoff_cap_s=config.backoff_cap_s,
    )
    sender.on_commands = poller.wake
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()
        agent.wake()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    sender.start()
    poller.start()
    logging.getLogger("agent").info("reporting node %s to %s", config.node, config.portal_url)
    try:
        agent.run(stop, config.interval_s)
    finally:
        poller.stop()
        sender.stop()
        nvml.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
