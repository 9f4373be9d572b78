"""Blocking cluster access for the Spark driver and executors: queues, offsets, commits, range reads.

One ``BrokerView`` per (NameServer, group) and process is cached (``view_for``), so the
Python workers Spark reuses keep their connections from task to task.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import re
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from sparkmq.client import loop_thread
from sparkmq.client.pull_consumer import (
    PULL_TIMEOUT_MARGIN_S,
    AsyncPullConsumer,
    PullResult,
    decode_pull,
    pull_request_fields,
)
from sparkmq.client.responses import check_response
from sparkmq.client.security import ClientSecurity
from sparkmq.client.selector import MessageSelector
from sparkmq.connector.direct_pull import PullConnection, PullConnectionError
from sparkmq.connector.local_reads import LocalQueueReads, LocalReadDeclined, StoreFiles, usable, verified_store
from sparkmq.connector.view_cache import ViewCache
from sparkmq.errors import DataLossError, OptionError, SparkmqError, TopicNotExistError
from sparkmq.message.names import MASTER_ID, is_system_topic  # topicPattern never matches these
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue, TopicList
from sparkmq.protocol.headers import OffsetResponseHeader, SearchOffsetRequestHeader

logger = logging.getLogger(__name__)
T = TypeVar("T")
# Pulls in flight per range read: enough that a task decoding 4096 records in ~0.4 ms never waits
# for the broker's next answer (one pull costs the broker ~1.5 ms), few enough to bound memory
# (each answer holds up to pullBatchSize records, ~1 MiB for 4096 of 250 bytes).
PULLS_AHEAD = 4


class BrokerView:
    """Queue and offset operations, each a blocking call run on the client loop."""

    def __init__(self, namesrv_addr: str, group: str, security: ClientSecurity | None = None) -> None:
        self.namesrv_addr = namesrv_addr
        self.group = group
        self._reader = AsyncPullConsumer(group, namesrv_addr, auto_commit_interval_s=None, security=security)
        self._security = security
        loop_thread.run(self._reader.instance.start())

    def close(self) -> None:
        """Stop the view's client: its heartbeats, route refreshes and connections."""
        self._run(self._reader.close())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return loop_thread.run(coro)

    # -- queues ----------------------------------------------------------------------------
    def queues(
        self, topics: Iterable[str] = (), pattern: str | None = None, assign: dict[str, tuple[int, ...]] | None = None
    ) -> list[MessageQueue]:
        """Readable queues of ``topics``, of the topics matching ``pattern``, or the assigned ones."""
        return self._run(self._queues(list(topics), pattern, assign))

    async def _queues(
        self, topics: list[str], pattern: str | None, assign: dict[str, tuple[int, ...]] | None
    ) -> list[MessageQueue]:
        if pattern is not None:
            regex = re.compile(pattern)
            topics = [t for t in await self._all_topics() if regex.fullmatch(t) and not is_system_topic(t)]
        if assign is not None:
            queues = []
            for topic, ids in assign.items():
                known = {q.queue_id: q for q in await self._topic_queues(topic, must_exist=True)}
                missing = [i for i in ids if i not in known]
                if missing:
                    raise OptionError("assign", f"names queues {missing} that topic {topic} does not have")
                queues += [known[i] for i in ids]
            return queues
        found: list[MessageQueue] = []
        for topic in topics:
            found += await self._topic_queues(topic, must_exist=pattern is None)
        return found

    async def _topic_queues(self, topic: str, must_exist: bool) -> list[MessageQueue]:
        try:
            return (await self._reader.instance.route(topic, refresh=True)).subscribe_queues()
        except TopicNotExistError:
            if must_exist:
                raise
            return []

    async def _all_topics(self) -> list[str]:
        last: SparkmqError | None = None
        for address in self._reader.instance.namesrv_addresses:
            try:
                response = await self._reader.instance.remoting.invoke(
                    address, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER
                )
                return sorted(TopicList.decode(check_response(response, "topic list").body).topic_list)
            except SparkmqError as exc:
                last = exc
        assert last is not None
        raise last

    # -- offsets ---------------------------------------------------------------------------
    def max_offsets(self, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        return self._run(self._each(queues, self._reader.max_offset))

    def min_offsets(self, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        return self._run(self._each(queues, self._reader.min_offset))

    def committed(self, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        """The group's committed offsets (-1 where none).

        QUERY_CONSUMER_OFFSET alone cannot say "none": like Java's ConsumerManageProcessor, the
        broker answers 0 for a group without an offset while the queue still begins at 0. So we
        first ask each broker (GET_CONSUME_STATS with a blank topic, Java's ``whichTopicByConsumer``)
        which topics the group has offsets for; queues of other topics have none.
        """
        return self._run(self._committed(queues))

    async def _committed(self, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        brokers = sorted({q.broker_name for q in queues})
        known = dict(zip(brokers, await asyncio.gather(*(self._group_topics(b) for b in brokers)), strict=True))
        with_offsets = [q for q in queues if q.topic in known[q.broker_name]]
        found = await self._each(with_offsets, self._reader.committed)
        return {q: found.get(q, -1) for q in queues}

    async def _group_topics(self, broker_name: str) -> set[str]:
        """Topics for which ``broker_name`` holds offsets of this group."""
        # imported here: only the driver asks, and the admin codecs cost the executors' workers ~20 ms to import
        from sparkmq.protocol.admin_bodies import ConsumeStats
        from sparkmq.protocol.admin_headers import GetConsumeStatsRequestHeader

        fields = GetConsumeStatsRequestHeader(self.group, None).to_fields()
        response = await self._reader.instance.invoke_read_broker(broker_name, RequestCode.GET_CONSUME_STATS, fields)
        stats = ConsumeStats.decode(check_response(response, f"consume stats of {self.group}").body)
        return {queue.topic for queue in stats.offset_table}

    def offsets_for_timestamp(self, queues: list[MessageQueue], timestamp_ms: int) -> dict[MessageQueue, int]:
        async def search(queue: MessageQueue) -> int:
            fields = SearchOffsetRequestHeader(queue.topic, queue.queue_id, timestamp_ms).to_fields()
            response = await self._reader.instance.invoke_queue_broker(
                queue, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields
            )
            return OffsetResponseHeader.from_fields(
                check_response(response, f"offset by time of {queue}").ext_fields
            ).offset

        return self._run(self._each(queues, search))

    async def _each(
        self, queues: list[MessageQueue], action: Callable[[MessageQueue], Awaitable[int]]
    ) -> dict[MessageQueue, int]:
        values = await asyncio.gather(*(action(q) for q in queues))
        return dict(zip(queues, values, strict=True))

    def commit(self, offsets: dict[MessageQueue, int]) -> None:
        """Commit offsets to the group in the broker's offset manager."""
        if offsets:
            self._run(self._reader.commit(offsets))

    def broker_address(self, queue: MessageQueue) -> str:
        return self._reader.instance.broker_address(queue.broker_name)

    # -- reading ---------------------------------------------------------------------------
    def read_range(
        self,
        queue: MessageQueue,
        start: int,
        end: int,
        batch_size: int,
        expression: str | MessageSelector = "*",
        fail_on_data_loss: bool = True,
    ) -> Iterator[bytes | memoryview]:
        """Pull bodies (whole stored records) covering exactly queue offsets [start, end).

        A start below the queue's minimum (retention) or a gap is data loss: raised as
        DataLossError naming queue, range and cause, or skipped when ``fail_on_data_loss``
        is False. The last body may hold records at or past ``end``; callers trim by offset.

        The pulls go over the calling thread's own socket (``direct_pull``); when that cannot
        connect or breaks, the rest of the range is read through the client (which also tries
        the broker's other members).
        """
        position: int | None = start
        connection = self._lend(queue)
        if connection is not None:
            pulls = _SocketPulls(self.group, connection, queue, expression, self._reader.instance.suggested_broker)
            broken = False
            try:
                for body, position in pipelined(pulls, queue, start, end, batch_size, fail_on_data_loss):  # noqa: B007
                    if body is not None:
                        yield body
                return
            except PullConnectionError as exc:
                broken = True
                logger.warning("%s; reading %s from offset %d through the client", exc.remark, queue, position)
            finally:
                pulls.drop_all()
                pull_sockets.give_back(connection, self._security, broken)
        if position is None:
            return
        client = _ClientPulls(self._reader, queue, expression)
        try:
            for body, _ in pipelined(client, queue, position, end, batch_size, fail_on_data_loss):
                if body is not None:
                    yield body
        finally:
            client.drop_all()  # the caller stopped early, or the range ended

    def _lend(self, queue: MessageQueue) -> PullConnection | None:
        """A socket of this thread's own to the broker serving ``queue`` (None: read through the client)."""
        instance = self._reader.instance
        preferred = instance.suggested_broker.get(queue, MASTER_ID)
        addresses = instance.read_addresses(queue.broker_name, preferred)
        if not addresses:
            self._run(instance.route(queue.topic, refresh=True))
            addresses = instance.read_addresses(queue.broker_name, preferred)
        if not addresses:
            return None  # the client path names the missing broker
        connection = pull_sockets.lend(addresses[:1], self._security)
        if connection is None:
            logger.warning("no pull socket to %s; reading %s through the client", addresses[0], queue)
        return connection


def pipelined(
    pulls: _Pulls, queue: MessageQueue, start: int, end: int, batch_size: int, fail_on_data_loss: bool
) -> Iterator[tuple[bytes | memoryview | None, int | None]]:
    """Each pull's body (or None) and the offset after it, in offset order (None: the range stops early).

    Up to ``PULLS_AHEAD`` pulls are on their way while the caller decodes a body: the broker's
    work, the transfer and the task's overlap. Each is sent where the previous one is expected
    to end (its start plus the last pull's advance); a pull whose start turns out wrong (a
    shorter answer: a filter, the broker's byte limit) is dropped with those after it and sent
    again from the right offset.
    """
    stride, following = batch_size, start  # the predicted advance of a pull; where the next one goes

    def pull_ahead() -> None:
        nonlocal following
        while len(pulls.pending) < PULLS_AHEAD and following < end:
            count = min(batch_size, end - following)
            pulls.send(following, count)
            following += min(stride, count)

    pull_ahead()
    while pulls.pending:
        offset = pulls.pending[0][0]
        body, advanced_to = _step(queue, offset, end, *pulls.result(), fail_on_data_loss)
        if advanced_to is None:
            yield body, None
            return
        if advanced_to != (pulls.pending[0][0] if pulls.pending else following):  # mispredicted: send again
            pulls.drop_all()
            following = advanced_to
        if advanced_to > offset:
            stride = advanced_to - offset
        pull_ahead()
        yield body, advanced_to


def _step(
    queue: MessageQueue,
    offset: int,
    end: int,
    result: PullResult,
    body: bytes | memoryview,
    fail_on_data_loss: bool,
) -> tuple[bytes | memoryview | None, int | None]:
    """One pull's outcome: the body to hand on (or None) and the offset to pull next (None: stop)."""
    if result.status == ResponseCode.PULL_OFFSET_MOVED or (result.found is False and result.min_offset > offset):
        where = f"queue {queue.topic}/{queue.broker_name}/{queue.queue_id}"
        lost = (
            f"{where} offsets [{offset}, {min(result.min_offset, end)}) are gone "
            f"(the broker's minimum is {result.min_offset}: deleted by retention)"
        )
        if fail_on_data_loss:
            raise DataLossError(lost + "; set failOnDataLoss=false to skip them")
        return None, max(result.min_offset, offset + 1) if result.min_offset > offset else result.next_begin_offset
    if result.status == ResponseCode.PULL_NOT_FOUND:
        if fail_on_data_loss:
            raise DataLossError(
                f"queue {queue.topic}/{queue.broker_name}/{queue.queue_id} ends at "
                f"{result.max_offset}, before the planned end {end} (offsets went backwards)"
            )
        return None, None
    if result.status == ResponseCode.PULL_RETRY_IMMEDIATELY:  # only filtered-out records
        return None, result.next_begin_offset
    return body, result.next_begin_offset


class _Pulls:
    """Pulls of one queue in flight, oldest first: ``pending`` holds (start offset, handle)."""

    def __init__(self, queue: MessageQueue, expression: str | MessageSelector) -> None:
        self.queue, self.expression = queue, expression
        self.pending: deque[tuple[int, Any]] = deque()

    def send(self, offset: int, count: int) -> None:
        raise NotImplementedError

    def result(self) -> tuple[PullResult, bytes | memoryview]:
        """The oldest pull's result and its body (it leaves ``pending``)."""
        raise NotImplementedError

    def drop_all(self) -> None:
        raise NotImplementedError


class _ClientPulls(_Pulls):
    """Through the client: each pull a coroutine on the client loop thread."""

    def __init__(self, reader: AsyncPullConsumer, queue: MessageQueue, expression: str | MessageSelector) -> None:
        super().__init__(queue, expression)
        self.reader = reader

    def send(self, offset: int, count: int) -> None:
        request = self.reader.pull_raw(self.queue, offset, count, 0.0, self.expression)
        self.pending.append((offset, loop_thread.submit(request)))

    def result(self) -> tuple[PullResult, bytes | memoryview]:
        future: Future[PullResult] = self.pending.popleft()[1]
        result = future.result()
        return result, result.body

    def drop_all(self) -> None:
        for _, future in self.pending:
            future.cancel()
        self.pending.clear()


class _SocketPulls(_Pulls):
    """Over the task thread's own socket (``direct_pull.PullConnection``); the broker each answer
    suggests for the queue's next pull goes into ``suggestions`` (the client's) when given."""

    def __init__(
        self,
        group: str,
        connection: PullConnection,
        queue: MessageQueue,
        expression: str | MessageSelector,
        suggestions: dict[MessageQueue, int] | None = None,
    ) -> None:
        super().__init__(queue, expression)
        self.group, self.connection, self.suggestions = group, connection, suggestions

    def send(self, offset: int, count: int) -> None:
        fields = pull_request_fields(self.group, self.queue, offset, count, 0.0, self.expression)
        self.pending.append((offset, self.connection.send(fields)))

    def result(self) -> tuple[PullResult, bytes | memoryview]:
        offset, opaque = self.pending.popleft()
        command, body = self.connection.answer(opaque)
        result, suggested = decode_pull(self.queue, offset, command)
        if self.suggestions is not None:
            self.suggestions[self.queue] = suggested
        return result, body

    def drop_all(self) -> None:
        for _, opaque in self.pending:
            self.connection.forget(opaque)
        self.pending.clear()


# -- reading at planned addresses, no client -----------------------------------------------------
class PullSockets:
    """This process's idle direct pull sockets between range reads, per (address, security).

    Shared by every group and by both read paths (``BrokerView.read_range``, ``read_planned``):
    a PULL_MESSAGE names its group, so a socket serves any of them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, ClientSecurity | None], list[PullConnection]] = {}

    def lend(self, addresses: list[str], security: ClientSecurity | None) -> PullConnection | None:
        """An idle live socket to the first address that has one or connects; None when none does."""
        for address in addresses:
            with self._lock:
                idle = self._idle.get((address, security)) or []
                while idle:
                    kept = idle.pop()
                    if kept.alive():
                        return kept
                    kept.close()
            try:
                return PullConnection(address, security, PULL_TIMEOUT_MARGIN_S)
            except PullConnectionError as exc:
                logger.info("%s", exc.remark)
        return None

    def give_back(self, connection: PullConnection, security: ClientSecurity | None, broken: bool) -> None:
        """Keep ``connection`` for the next read, unless it broke or is no longer usable."""
        if not broken and connection.usable:
            with self._lock:
                self._idle.setdefault((connection.address, security), []).append(connection)
                return
        connection.close()

    def idle(self) -> list[PullConnection]:
        """The sockets kept now (for tests and benches)."""
        with self._lock:
            return [c for connections in self._idle.values() for c in connections]

    def close_idle(self) -> None:
        """Close the kept sockets; a range read still running keeps (or closes) its own when done."""
        with self._lock:
            idle = [c for connections in self._idle.values() for c in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()


pull_sockets = PullSockets()
atexit.register(pull_sockets.close_idle)


def read_planned(
    group: str,
    queue: MessageQueue,
    addresses: Iterable[str],
    start: int,
    end: int,
    batch_size: int,
    expression: str | MessageSelector = "*",
    fail_on_data_loss: bool = True,
    security: ClientSecurity | None = None,
    local_reads: bool = True,
) -> Generator[bytes | memoryview, None, int | None]:
    """``BrokerView.read_range`` at the addresses the driver planned (master first, then slaves):
    no client, no NameServer. Returns None when the range is read (or stopped early as the view's
    read does), else the offset from which the caller reads the rest through ``view_for``: when no
    address connects, or the connection breaks (the broker moved, stopped, or closed it).

    With ``local_reads`` the records come from the broker's store files when this process runs
    beside it (``local_reads.py``); the rest of the range, from wherever those decline, is pulled.
    Sockets are kept per address for the process, shared by all groups (pull requests name the group).
    """
    connection = pull_sockets.lend(list(addresses), security)
    if connection is None:
        return start
    pulls = _SocketPulls(group, connection, queue, expression)
    position: int | None = start
    broken = False
    try:
        first = start
        if local_reads and usable(expression) and (files := verified_store(connection, group, queue, start)):
            rest = yield from _read_locally(files, queue, start, end, batch_size, fail_on_data_loss)
            if rest is None:
                return None
            first = position = rest
        for body, position in pipelined(pulls, queue, first, end, batch_size, fail_on_data_loss):  # noqa: B007
            if body is not None:
                yield body
        return None
    except PullConnectionError as exc:
        broken = True
        logger.warning("%s; reading %s from offset %d through the client", exc.remark, queue, position)
        return position
    finally:
        pulls.drop_all()
        pull_sockets.give_back(connection, security, broken)


def _read_locally(
    files: StoreFiles, queue: MessageQueue, start: int, end: int, batch_size: int, fail_on_data_loss: bool
) -> Generator[bytes | memoryview, None, int | None]:
    """Bodies of [start, end) read from the store's files; returns None when all were read, else
    the offset from which the files declined (the caller pulls the rest)."""
    position: int | None = start
    with LocalQueueReads(files, queue.topic, queue.queue_id) as reads:
        reading = pipelined(_LocalPulls(reads, queue), queue, start, end, batch_size, fail_on_data_loss)
        try:
            for body, position in reading:  # noqa: B007
                if body is not None:
                    yield body
            return None
        except LocalReadDeclined as exc:
            logger.info("%s of %s; pulling the rest from the broker", exc, queue)
            return position


class _LocalPulls(_Pulls):
    """Reads of the store's files in the shape of pulls (each "sent" one is read when its result is asked)."""

    def __init__(self, reads: LocalQueueReads, queue: MessageQueue) -> None:
        super().__init__(queue, "*")
        self.reads = reads

    def send(self, offset: int, count: int) -> None:
        self.pending.append((offset, count))

    def result(self) -> tuple[PullResult, bytes | memoryview]:
        offset, count = self.pending.popleft()
        body, following = self.reads.read(offset, count)
        if body is None:  # only blank units
            return PullResult(ResponseCode.PULL_RETRY_IMMEDIATELY, b"", following, 0, following), b""
        return PullResult(ResponseCode.SUCCESS, b"", following, 0, following), body  # the body apart, as a socket's

    def drop_all(self) -> None:
        self.pending.clear()


#: At exit nothing per view: the idle pull sockets are the pool's (closed by its own at-exit hook),
#: and stopping a client needs its event loop, which may be gone by then. A view no read has used
#: for ``idle_s`` is closed: its client stops heartbeating a cluster no query of this worker reads.
_cache: ViewCache[BrokerView] = ViewCache(BrokerView, lambda _view: None, close_idle=BrokerView.close)


def view_for(namesrv_addr: str, group: str, security: ClientSecurity | None = None) -> BrokerView:
    """The process's view of a cluster for ``group`` (created once, started on the client loop), kept."""
    return _cache.get(namesrv_addr, group, security)


def leased_view(
    namesrv_addr: str, group: str, security: ClientSecurity | None = None
) -> AbstractContextManager[BrokerView]:
    """The same view while the ``with`` block runs; closed once no read has leased it for a while."""
    return _cache.lease(namesrv_addr, group, security)


def close_views() -> None:
    """Close and forget this process's cached views (e.g. before the brokers they talk to stop)."""
    pull_sockets.close_idle()
    for view in _cache.take_all():
        view.close()
