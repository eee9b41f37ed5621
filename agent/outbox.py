"""The results of MIG commands, kept until the portal has acknowledged them, and remembered after that.

A result leaves ``pending`` only on the portal's 2xx (or a 4xx that says resending cannot help), so a lost
connection loses none. Every result this agent produced stays known (the newest ``keep``), so a command the portal
lists again, because its result has not arrived or crossed the listing, is re-reported from the kept result and
never run twice. With a ``path`` both survive a restart of the agent (a JSON file, replaced atomically on each
change; results are rare, so a write each is cheap); without one a restart forgets them, which the commands'
idempotence (a create finds its instance, a destroy finds nothing to remove) makes safe, only slower.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("agent.outbox")


class Outbox:
    """Thread-safe: the sampler records results, the sender acknowledges them, the poller asks what it knows."""

    def __init__(self, path: str | Path | None = None, keep: int = 256) -> None:
        self.path = Path(path) if path else None
        self.keep = keep
        self._lock = threading.Lock()
        # command id -> (batch key, result body); insertion order is the order to send in.
        self._known: collections.OrderedDict[int, tuple[str, dict[str, Any]]] = collections.OrderedDict()
        self._pending: dict[int, None] = {}
        self._load()

    def record(self, command_id: int, batch_key: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._known[command_id] = (batch_key, body)
            self._known.move_to_end(command_id)
            while len(self._known) > self.keep:  # forget the oldest acknowledged ones, never one still to send
                old = next((i for i in self._known if i not in self._pending and i != command_id), None)
                if old is None:
                    break
                del self._known[old]
            self._pending[command_id] = None
            self._save()

    def known(self, command_id: int) -> dict[str, Any] | None:
        with self._lock:
            entry = self._known.get(command_id)
            return None if entry is None else entry[1]

    def resend(self, command_id: int) -> None:
        """Queue a known result again (the portal listed its command again: it has not recorded it)."""
        with self._lock:
            if command_id in self._known and command_id not in self._pending:
                self._pending[command_id] = None
                self._save()

    def batch_failed(self, batch_key: str) -> bool:
        """Whether a command of this batch failed here: its later commands must not run."""
        with self._lock:
            return any(key == batch_key and not body["ok"] for key, body in self._known.values())

    def next_pending(self) -> tuple[int, dict[str, Any]] | None:
        with self._lock:
            for command_id in self._pending:
                return command_id, self._known[command_id][1]
            return None

    def ack(self, command_id: int) -> None:
        with self._lock:
            if self._pending.pop(command_id, "gone") is None:
                self._save()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # --- the file -------------------------------------------------------------------------------------------

    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            for command_id, batch_key, body in data["known"]:
                self._known[int(command_id)] = (str(batch_key), dict(body))
            self._pending = {int(i): None for i in data["pending"] if int(i) in self._known}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("cannot read the outbox %s (%s); starting empty", self.path, exc)
            self._known.clear()
            self._pending = {}

    def _save(self) -> None:
        if self.path is None:
            return
        data = {"known": [[i, key, body] for i, (key, body) in self._known.items()], "pending": list(self._pending)}
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:  # a full or read-only disk: keep going in memory, the portal still gets the results
            log.error("cannot write the outbox %s: %s", self.path, exc)
