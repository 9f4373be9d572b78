"""The master's side of HA: stream CommitLog bytes to each connected slave from the offset it reports.

``HAConnection`` of RocketMQ 4.x: per slave, a reader takes 8-byte offset reports (the first
one says where to start; each one acknowledges bytes, see ``SlaveAcks``) and a writer sends
``header + bytes`` runs of at most ``haTransferBatchSize``, or a bare header as a heartbeat after
``haSendHeartbeatInterval`` without data. A slave reporting 0 (an empty store) starts at the
beginning of the master's newest CommitLog segment, as in Java.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence

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

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> int:
        """Bind the HA port; return it."""
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self._server = await asyncio.start_server(self._accept, self._host, self._port)
        return self.port

    def on_put(self, _keys: Sequence[tuple[str, int]], _ends: Mapping[tuple[str, int], int]) -> None:
        """The store's group dispatch listener: ``wake`` while a slave is linked (a link that comes
        later reads from the offset it asks for, so a put before it needs no wake-up)."""
        if self._links:
            self.wake()

    def wake(self) -> None:
        """New bytes were written: every idle writer looks again (``WaitNotifyObject.wakeupAll``).

        May be called from any thread (the store's dispatch listeners run on the writer's thread).
        """
        if threading.get_ident() != self._loop_thread:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self.wake)
            return
        for link in self._links:
            link.new_data.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _SlaveLink(self, reader, writer)
        self._links.add(link)
        try:
            await link.run()
        finally:
            if link.replica is not None:
                self.acks.unlink(link.key, link.replica)
                self.acks.settle()
            self._links.discard(link)

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


class _SlaveLink:
    """One slave connection: a report reader and a data writer; either ending ends both."""

    def __init__(self, source: ReplicationSource, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.source = source
        self.reader, self.writer = reader, writer
        self.peer = writer.get_extra_info("peername")
        self.new_data = asyncio.Event()
        self.requested: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.key: object = self  # the slave's brokerId once a controller-mode handshake names it
        self.replica: ReplicaAck | None = None

    async def run(self) -> None:
        logger.info("HA slave %s connected", self.peer)
        tasks = [asyncio.create_task(self._read_reports()), asyncio.create_task(self._transfer())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    exc = task.exception()
                    level = (
                        logging.INFO
                        if isinstance(exc, (ConnectionError, asyncio.IncompleteReadError))
                        else logging.ERROR
                    )
                    logger.log(level, "HA slave %s link ended: %r", self.peer, exc)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.abort()
            logger.info("HA slave %s disconnected", self.peer)

    def abort(self) -> None:
        self.writer.transport.abort()

    def _sent(self) -> None:
        """A transfer went out: once the slave reports the master's end as of now, it was caught up now
        (``lastMasterMaxOffset`` / ``lastTransferTimeMs`` of Java's HAConnection)."""
        if self.replica is not None:
            self.replica.transferred(self.source.max_offset(), now_ms())

    async def _read_reports(self) -> None:
        (offset,) = REPORT.unpack(await self.reader.readexactly(REPORT.size))
        if offset == HANDSHAKE_MARK:
            (self.key,) = REPORT.unpack(await self.reader.readexactly(REPORT.size))
            (offset,) = REPORT.unpack(await self.reader.readexactly(REPORT.size))
            logger.info("HA slave %s is broker %s", self.peer, self.key)
        self.replica = replica = self.source.acks.link(self.key)
        self.requested.set_result(offset)
        while True:
            self.source.acks.ack(replica, offset)
            (offset,) = REPORT.unpack(await self.reader.readexactly(REPORT.size))

    async def _transfer(self) -> None:
        source = self.source
        offset = source.first_offset(await self.requested)
        logger.info("HA slave %s: transfer starts at offset %d", self.peer, offset)
        loop = asyncio.get_running_loop()
        last_write = loop.time()
        while True:
            self.new_data.clear()
            data = source.read_run(offset, source.batch_bytes)
            if data:
                self.writer.writelines((encode_transfer_header(offset, len(data)), data))  # one send
                await self.writer.drain()
                offset += len(data)
                self._sent()
                last_write = loop.time()
                continue
            if data is None:
                logger.error("HA slave %s asks for offset %d, which this master no longer holds", self.peer, offset)
            if loop.time() - last_write >= source.heartbeat_s:
                self.writer.write(encode_transfer_header(offset, 0))
                await self.writer.drain()
                self._sent()
                last_write = loop.time()
            try:  # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a close()'s cancel
                async with asyncio.timeout(source.heartbeat_s):
                    await self.new_data.wait()
            except TimeoutError:
                pass  # time for a heartbeat
