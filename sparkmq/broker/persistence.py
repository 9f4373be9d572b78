"""TablePersister: writes the broker's changed tables on a worker thread, never on the event loop.

consumerOffset.json, topics.json, subscriptionGroup.json and delayOffset.json are each written
tmp → fsync → rename with a ``.bak`` (``ConfigFile``): two or three fsyncs that may block for
as long as the disk likes. The event loop only takes a snapshot (a dict copy) when a table's
version counter moved; the write runs in ``asyncio.to_thread``. Many changes between two
rounds (5,000 new groups from 5,000 PULLs) cost one write. A failed write is logged with its
traceback and retried next round, while the other tables are still written.

For example::

    persister = TablePersister("broker-a")
    persister.add("topics", lambda: topics.version, topics.wrapper, topics.write)
    task = loop.create_task(run_every(1.0, persister.persist_changed, "persist-tables"))
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class PersistedTable:
    """One table: how to read its version, snapshot it (on the loop) and write a snapshot (on a thread)."""

    name: str
    version: Callable[[], int]
    snapshot: Callable[[], Any]
    write: Callable[[Any], None]
    min_interval_s: float
    saved_version: int
    last_write: float = float("-inf")


class TablePersister:
    """The broker's persisted tables, written when changed; one round at a time."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tables: dict[str, PersistedTable] = {}
        self._lock = asyncio.Lock()

    def add(
        self,
        name: str,
        version: Callable[[], int],
        snapshot: Callable[[], Any],
        write: Callable[[Any], None],
        min_interval_s: float = 0.0,
    ) -> None:
        """Track a table whose current state is on disk already (its version now counts as saved)."""
        self._tables[name] = PersistedTable(name, version, snapshot, write, min_interval_s, version())

    async def persist_changed(self, *, ignore_intervals: bool = False) -> list[str]:
        """Write every table whose version moved (and whose interval passed); return the names that failed.

        Each failure is logged with its traceback; the table stays dirty, so the next round retries it.
        """
        async with self._lock:
            failed = []
            for table in self._tables.values():
                if not await self._write_if_changed(table, ignore_intervals):
                    failed.append(table.name)
            return failed

    async def persist(self, name: str) -> None:
        """Write table ``name`` now if it changed, raising what the write raised (an admin's ack waits on it)."""
        async with self._lock:
            table = self._tables[name]
            version = table.version()
            if version != table.saved_version:
                await self._write(table, version)

    async def _write_if_changed(self, table: PersistedTable, ignore_intervals: bool) -> bool:
        version = table.version()
        if version == table.saved_version:
            return True
        if not ignore_intervals and asyncio.get_running_loop().time() - table.last_write < table.min_interval_s:
            return True
        try:
            await self._write(table, version)
        except Exception:  # logged with the traceback; the table stays dirty and the next round retries
            logger.exception("%s: persisting %s failed; retried next round", self.owner, table.name)
            return False
        return True

    async def _write(self, table: PersistedTable, version: int) -> None:
        table.last_write = asyncio.get_running_loop().time()
        await asyncio.to_thread(table.write, table.snapshot())
        table.saved_version = version
