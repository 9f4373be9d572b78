"""The master's side of HA: stream CommitLog bytes to each connected slave from the offset it reports.

``HAConnection`` of RocketMQ 4.x: per slave, 8-byte offset reports are read (the first one says
where to start; each one acknowledges bytes, see ``SlaveAcks``) and ``header + bytes`` runs of at
most ``haTransferBatchSize`` are sent, or a bare header as a heartbeat after
``haSendHeartbeatInterval`` without data, all in the link's transport callbacks (no task per link).
A slave reporting 0 (an empty store) starts at the beginning of the master's newest CommitLog
segment, as in Java.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import cast

from sparkmq.broker.ha.acks import ReplicaAck, SlaveAcks, now_ms
from sparkmq.broker.ha.wire import HANDSHAKE_MARK, REPORT, encode_transfer_header

logger = logging.getLogger(__name__)

ReadRun = Callable[[int, int], "bytes | None"]  # (offset, max_bytes) -> bytes, b"" = nothing yet, None = gone


class ReplicationSource:
    """Listens on the HA port; one :class:`_SlaveLink` per connected slave."""

    def __init__(
        self,
        host: str,
        port: int,
        read_run: ReadRun,
        max_offset: Callable[[], int],
        segment_bytes: int,
        batch_bytes: int,
        heartbeat_s: float,
        acks: SlaveAcks,
    ) -> None:
        self._host, self._port = host, port
        self.read_run, self.max_offset, self._segment_bytes = read_run, max_offset, segment_bytes
        self.batch_bytes, self.heartbeat_s = batch_bytes, heartbeat_s
        self.acks = acks
        self._server: asyncio.Server | None = None
        self._links: set[_SlaveLink] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._woken = False  # a send to every link is scheduled

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> int:
        """Bind the HA port; return it."""
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self._server = await self._loop.create_server(lambda: _SlaveLink(self), self._host, self._port)
        return self.port

    def on_put(self, _keys: Sequence[tuple[str, int]], _ends: Mapping[tuple[str, int], int]) -> None:
        """The store's group dispatch listener: ``wake`` while a slave is linked (a link that comes
        later reads from the offset it asks for, so a put before it needs no wake-up)."""
        if self._links:
            self.wake()

    def wake(self) -> None:
        """New bytes were written: every idle link sends them (``WaitNotifyObject.wakeupAll``), once the
        current callback is done (the store may still hold its lock). May be called from any thread."""
        if self._woken:
            return
        if threading.get_ident() != self._loop_thread:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self.wake)
            return
        assert self._loop is not None
        self._woken = True
        self._loop.call_soon(self._send_all)

    def _send_all(self) -> None:
        self._woken = False
        for link in list(self._links):
            link.send()

    def first_offset(self, requested: int) -> int:
        """Where a slave that reported ``requested`` starts (``WriteSocketService``'s choice)."""
        if requested != 0:
            return requested
        end = self.max_offset()
        return end - end % self._segment_bytes

    def disconnect_all(self) -> int:
        """Drop every slave link (each slave reconnects and resumes from its own end); return how many."""
        links = list(self._links)
        for link in links:
            link.abort()
        return len(links)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.disconnect_all()
        if self._server is not None:
            await self._server.wait_closed()


class _SlaveLink(asyncio.Protocol):
    """One slave connection, served in the transport's callbacks: its offset reports are read as they come
    (the first says where to start; each one acknowledges bytes, see ``SlaveAcks``), runs are sent when
    the source wakes the link and while the socket takes them, a heartbeat after ``heartbeat_s`` idle."""

    def __init__(self, source: ReplicationSource) -> None:
        self.source = source
        self.peer: object = None
        self.key: object = self  # the slave's brokerId once a controller-mode handshake names it
        self.replica: ReplicaAck | None = None
        self._transport: asyncio.Transport | None = None
        self._reports = bytearray()  # less than one whole report, or the handshake so far
        self._offset = -1  # where the next run starts; -1 until the slave's first report
        self._paused = False  # the socket's buffer is full: send nothing until it drains
        self._last_write = 0.0
        self._heartbeat: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of asyncio's
        self.peer = transport.get_extra_info("peername")
        self.source._links.add(self)
        logger.info("HA slave %s connected", self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self.source._links.discard(self)
        if self.replica is not None:
            self.source.acks.unlink(self.key, self.replica)
            self.source.acks.settle()
        if exc is not None and not isinstance(exc, ConnectionError):
            logger.error("HA slave %s link ended: %r", self.peer, exc)
        logger.info("HA slave %s disconnected", self.peer)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self.send()

    def data_received(self, data: bytes) -> None:
        self._reports += data
        whole = len(self._reports) - len(self._reports) % REPORT.size
        if self._offset < 0:
            whole = self._first_report(whole)
            if whole < 0:
                return
        if whole:
            (offset,) = REPORT.unpack_from(self._reports, whole - REPORT.size)  # the newest: reports only grow
            del self._reports[:whole]
            assert self.replica is not None
            self.source.acks.ack(self.replica, offset)

    def _first_report(self, whole: int) -> int:
        """Start the link once its first report (after a controller-mode handshake) is whole: -1 until then,
        else how many bytes of ``_reports`` are reports read after it."""
        if whole < REPORT.size:
            return -1
        (offset,) = REPORT.unpack_from(self._reports, 0)
        start = REPORT.size
        if offset == HANDSHAKE_MARK:
            if whole < 3 * REPORT.size:
                return -1
            (self.key,) = REPORT.unpack_from(self._reports, REPORT.size)
            (offset,) = REPORT.unpack_from(self._reports, 2 * REPORT.size)
            start = 3 * REPORT.size
            logger.info("HA slave %s is broker %s", self.peer, self.key)
        del self._reports[:start]
        self.replica = self.source.acks.link(self.key)
        self.source.acks.ack(self.replica, offset)
        self._offset = self.source.first_offset(offset)
        logger.info("HA slave %s: transfer starts at offset %d", self.peer, self._offset)
        assert self.source._loop is not None
        self._last_write = self.source._loop.time()
        self._heartbeat = self.source._loop.call_later(self.source.heartbeat_s, self._beat)
        self.send()
        return whole - start

    def _sent(self) -> None:
        """A transfer went out: once the slave reports the master's end as of now, it was caught up now
        (``lastMasterMaxOffset`` / ``lastTransferTimeMs`` of Java's HAConnection)."""
        if self.replica is not None:
            self.replica.transferred(self.source.max_offset(), now_ms())

    def send(self) -> None:
        """Send what was written from the link's offset on, run after run, while the socket takes it."""
        source, transport = self.source, self._transport
        if self._offset < 0 or transport is None or transport.is_closing():
            return
        while not self._paused:
            data = source.read_run(self._offset, source.batch_bytes)
            if not data:
                if data is None:
                    logger.error(
                        "HA slave %s asks for offset %d, which this master no longer holds", self.peer, self._offset
                    )
                return
            transport.writelines((encode_transfer_header(self._offset, len(data)), data))  # one send
            self._offset += len(data)
            self._sent()
            assert source._loop is not None
            self._last_write = source._loop.time()

    def _beat(self) -> None:
        """A heartbeat (a bare header) when nothing went out for ``heartbeat_s``; the next check then."""
        loop, heartbeat_s = self.source._loop, self.source.heartbeat_s
        assert loop is not None and self._transport is not None
        if self._transport.is_closing():
            return
        self.send()
        now = loop.time()
        if now - self._last_write >= heartbeat_s and not self._paused:
            self._transport.write(encode_transfer_header(self._offset, 0))
            self._sent()
            self._last_write = now
        next_at = now + heartbeat_s if self._paused else self._last_write + heartbeat_s
        self._heartbeat = loop.call_at(next_at, self._beat)
