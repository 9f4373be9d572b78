"""Blocking cluster access for the Spark driver and executors: queues, offsets, commits, range reads
through the client (the reads at planned addresses, which need no client: ``planned_reads``).

One ``BrokerView`` per (NameServer, group) and process is cached (``view_for``), so the
Python workers Spark reuses keep their connections from task to task.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from sparkmq.client import loop_thread
from sparkmq.client.pull_consumer import AsyncPullConsumer
from sparkmq.client.pull_wire import PullResult
from sparkmq.client.responses import check_response
from sparkmq.client.security import ClientSecurity
from sparkmq.client.selector import MessageSelector
from sparkmq.connector.direct_pull import PullConnection, PullConnectionError
from sparkmq.connector.planned_reads import Pulls, SocketPulls, pipelined, pull_sockets
from sparkmq.connector.view_cache import ViewCache
from sparkmq.errors import OptionError, SparkmqError, TopicNotExistError
from sparkmq.message.names import MASTER_ID, is_system_topic  # topicPattern never matches these
from sparkmq.protocol import RequestCode
from sparkmq.protocol.bodies import MessageQueue, TopicList
from sparkmq.protocol.offset_headers import OffsetResponseHeader, SearchOffsetRequestHeader

logger = logging.getLogger(__name__)
T = TypeVar("T")


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
            pulls = SocketPulls(self.group, connection, queue, expression, self._reader.instance.suggested_broker)
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


class _ClientPulls(Pulls):
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
