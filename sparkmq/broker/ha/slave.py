"""The slave's side of HA: connect to the master's HA port and append what it streams (``HAService.HAClient``).

The slave reports its CommitLog max offset on connecting, after every receipt and every
``haSendHeartbeatInterval``; the master answers with its bytes from exactly that offset, so a
restart or a dropped link resumes where the slave's own log ends: no gap, no duplicate. A run is
acknowledged once appended, then dispatched (Java's HAClient reports before its reput). A run
whose offset does not continue the link's last one (``slavePhyOffset != masterPhyOffset``), or
whose bytes the store refuses (``store.replica``: damaged in flight), closes the link; the next one
starts again from the slave's own end.
Where the master is comes from ``master_address()`` each time a link is opened: configured
(``haMasterAddress``) or learned from the NameServer's register result, or set by a future
failover controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sparkmq.broker.ha.wire import TRANSFER_HEADER, decode_transfer_header, encode_handshake, encode_report
from sparkmq.errors import SparkmqError

logger = logging.getLogger(__name__)
# HAClient closes a link on which the master sent nothing (not even a heartbeat) for this long.
HOUSEKEEPING_INTERVAL_S = 20.0

AppendRun = Callable[[int, bytes], int]  # (offset, data) -> new max offset; raises StoreError


class ReplicationSink:
    """Keeps one link to the master open (reconnecting after ``retry_s``) and appends its bytes."""

    def __init__(
        self,
        master_address: Callable[[], Awaitable[str]],
        max_offset: Callable[[], int],
        append_run: AppendRun,
        dispatch: Callable[[], None],
        heartbeat_s: float,
        retry_s: float,
        broker_id: int | None = None,
    ) -> None:
        """``master_address`` is awaited before each link (a controller-mode replica first truncates its
        log to the consistent point there); ``broker_id`` (controller mode) opens the link with a handshake."""
        self._master_address = master_address
        self._broker_id = broker_id
        self._max_offset = max_offset
        self._append_run = append_run
        self._dispatch = dispatch
        self._heartbeat_s = heartbeat_s
        self._retry_s = retry_s
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sparkmq-ha-slave")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            address = ""
            try:
                address = await self._master_address()
                if address:
                    await self._link(address)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, SparkmqError) as exc:
                logger.warning("HA link to master %s ended: %r; retrying in %.1f s", address, exc, self._retry_s)
            except Exception:  # the link loop must outlive any one failure
                logger.exception("HA link to master %s failed; retrying in %.1f s", address, self._retry_s)
            finally:
                self.connected.clear()
            await asyncio.sleep(self._retry_s)

    async def _link(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the cancel of close()
        async with asyncio.timeout(HOUSEKEEPING_INTERVAL_S):
            reader, writer = await asyncio.open_connection(host, int(port))
        heartbeat = asyncio.get_running_loop().create_task(self._report_every(writer))
        try:
            if self._broker_id is not None:
                writer.write(encode_handshake(self._broker_id))
            expected = self._max_offset()  # where the master's next run starts (0: its choice)
            writer.write(encode_report(expected))
            await writer.drain()
            self.connected.set()
            logger.info("HA link to master %s open, reporting offset %d", address, expected)
            while True:
                async with asyncio.timeout(HOUSEKEEPING_INTERVAL_S):
                    header = await reader.readexactly(TRANSFER_HEADER.size)
                offset, size = decode_transfer_header(header)
                body = b""
                if size:
                    async with asyncio.timeout(HOUSEKEEPING_INTERVAL_S):
                        body = await reader.readexactly(size)
                if expected != 0 and expected != offset:
                    raise SparkmqError(f"master {address} sent offset {offset}, but this link expects {expected}")
                if body:
                    writer.write(encode_report(self._append_run(offset, body)))  # the ack leaves first:
                    self._dispatch()  # the master's waiting sends need the CommitLog, not the queues
                    await writer.drain()
                    expected = offset + size
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
            writer.transport.abort()

    async def _report_every(self, writer: asyncio.StreamWriter) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            writer.write(encode_report(self._max_offset()))
            await writer.drain()
