"""The slave's side of HA: connect to the master's HA port and append what it streams (``HAService.HAClient``).

The slave reports its CommitLog max offset on connecting, after every read that completed runs
and every ``haSendHeartbeatInterval``; the master answers with its bytes from exactly that offset, so
a restart or a dropped link resumes where the slave's own log ends: no gap, no duplicate. The runs of
a read are acknowledged once appended, then dispatched (Java's HAClient reports before its reput). A run
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
from typing import cast

from sparkmq.broker.ha.wire import TRANSFER_HEADER, decode_transfer_header, encode_handshake, encode_report
from sparkmq.errors import SparkmqError

logger = logging.getLogger(__name__)
# HAClient closes a link on which the master sent nothing (not even a heartbeat) for this long (checked
# at each of the slave's own reports).
HOUSEKEEPING_INTERVAL_S = 20.0

AppendRun = Callable[[int, bytes | memoryview], int]  # (offset, data) -> new max offset; raises StoreError


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
        loop = asyncio.get_running_loop()
        expected = self._max_offset()  # where the master's next run starts (0: its choice)
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the cancel of close()
        async with asyncio.timeout(HOUSEKEEPING_INTERVAL_S):
            transport, link = await loop.create_connection(
                lambda: _Link(address, expected, self._append_run, self._dispatch), host, int(port)
            )
        try:
            if self._broker_id is not None:
                transport.write(encode_handshake(self._broker_id))
            transport.write(encode_report(expected))
            self.connected.set()
            logger.info("HA link to master %s open, reporting offset %d", address, expected)
            while True:  # the link serves itself (``_Link.data_received``); here only its heartbeat
                done, _ = await asyncio.wait((link.ended,), timeout=self._heartbeat_s)
                if done:
                    raise link.ended.result()
                if loop.time() - link.last_read > HOUSEKEEPING_INTERVAL_S:
                    raise TimeoutError(f"master {address} sent nothing for {HOUSEKEEPING_INTERVAL_S:.0f} s")
                transport.write(encode_report(self._max_offset()))
        finally:
            transport.abort()


class _Link(asyncio.Protocol):
    """One link's receiving side: the whole transfers a read completes are each checked and appended
    (``append_run``), then acknowledged with one report and dispatched once, all in the read's callback
    (no task hop, no timer per run). A transfer's announced size is bounded (``decode_transfer_header``)
    before any byte of it is awaited; its bytes are buffered until whole."""

    def __init__(self, address: str, expected: int, append_run: AppendRun, dispatch: Callable[[], None]) -> None:
        self._address = address
        self._expected = expected
        self._append_run = append_run
        self._dispatch = dispatch
        self._pending = bytearray()
        self._need = TRANSFER_HEADER.size  # bytes ``_pending`` must hold before anything more can be taken
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self.last_read = self._loop.time()
        self.ended: asyncio.Future[BaseException] = self._loop.create_future()  # what ended the link

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of asyncio's

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or ConnectionError(f"master {self._address} closed the HA link"))

    def pause_writing(self) -> None:
        """The master does not read its acknowledgements: take no more runs until it does."""
        assert self._transport is not None
        self._transport.pause_reading()

    def resume_writing(self) -> None:
        assert self._transport is not None
        self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.last_read = self._loop.time()
        if self.ended.done():
            return
        if self._pending:
            self._pending += data
            if len(self._pending) < self._need:
                return
            data, self._pending = bytes(self._pending), bytearray()
        try:
            taken = self._take(data)
        except Exception as exc:  # the link ends; the next one starts again from this log's end
            self._end(exc)
            return
        if taken < len(data):
            self._pending = bytearray(memoryview(data)[taken:])

    def _take(self, data: bytes) -> int:
        """Append, acknowledge and dispatch the whole transfers at the start of ``data``; how many bytes they
        take. Those appended before one that fails are still acknowledged and dispatched."""
        view = memoryview(data)
        pos, appended = 0, -1
        try:
            while len(data) - pos >= TRANSFER_HEADER.size:
                offset, size = decode_transfer_header(view[pos : pos + TRANSFER_HEADER.size])
                end = pos + TRANSFER_HEADER.size + size
                if end > len(data):
                    self._need = end - pos
                    return pos
                if self._expected != 0 and self._expected != offset:
                    raise SparkmqError(
                        f"master {self._address} sent offset {offset}, but this link expects {self._expected}"
                    )
                if size:  # one append per transfer: a run never crosses a segment's end, two may
                    appended = self._append_run(offset, view[pos + TRANSFER_HEADER.size : end])
                    self._expected = offset + size
                pos = end
            self._need = TRANSFER_HEADER.size
            return pos
        finally:
            if appended >= 0:
                assert self._transport is not None
                self._transport.write(encode_report(appended))  # the ack leaves first:
                self._dispatch()  # the master's waiting sends need the CommitLog, not the queues

    def _end(self, exc: BaseException) -> None:
        if not self.ended.done():
            self.ended.set_result(exc)
        if self._transport is not None:
            self._transport.abort()
