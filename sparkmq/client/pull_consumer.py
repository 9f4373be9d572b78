"""Pull consumers: ``AsyncPullConsumer`` and the blocking ``PullConsumer``.

Assign queues (or subscribe to a topic's queues), ``poll`` for messages (long-polling on
the broker), ``seek``/``seek_to_begin``/``seek_to_end``, ``commit`` positions to the
broker's offset manager — explicitly or every ``auto_commit_interval_s``. ``pull_raw``
hands back a queue's stored records as one buffer for bulk decoding (the Spark path).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from sparkmq.client import loop_thread, trace_hooks
from sparkmq.client.instance import ClientInstance
from sparkmq.client.message import ReceivedMessage, decode_pull_body
from sparkmq.client.producer import trace_dispatcher
from sparkmq.client.pull_wire import PULL_TIMEOUT_MARGIN_S, PullResult, decode_pull, pull_request_fields
from sparkmq.client.rebalance import AllocateStrategy, allocate_averagely, strategy_named
from sparkmq.client.responses import check_response
from sparkmq.client.security import ClientSecurity
from sparkmq.client.selector import MessageSelector
from sparkmq.client.trace_data import CONSUME_SUCCESS
from sparkmq.client.trace_dispatcher import TraceDispatcher
from sparkmq.errors import SparkmqError
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.heartbeat import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from sparkmq.protocol.offset_headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from sparkmq.remoting.periodic import run_every, stop_tasks

logger = logging.getLogger(__name__)
REBALANCE_INTERVAL_S = 20.0


class AsyncPullConsumer:
    """Reads queues at positions the caller controls.

    ``assign`` reads exactly the queues given. ``subscribe`` makes this consumer a member of its
    group (RocketMQ's lite pull consumer): it heartbeats its subscriptions and the group's members
    split each subscribed topic's queues among themselves (``allocate``: a strategy of
    :mod:`sparkmq.client.rebalance` or its Java name), again every 20 s and whenever the broker
    says the members changed; a queue that moves away has its position committed first.

    For example::

        async with AsyncPullConsumer("CID_reports", "127.0.0.1:9876") as consumer:
            await consumer.subscribe("orders")
            messages = await consumer.poll(timeout_s=1.0)
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        pull_batch_size: int = 32,
        auto_commit_interval_s: float | None = 5.0,
        allocate: AllocateStrategy | str = allocate_averagely,
        instance_name: str | None = None,
        security: ClientSecurity | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
    ) -> None:
        self.group = group
        self.instance = ClientInstance(namesrv_addr, instance_name, security=security)
        self.tracer = (
            trace_dispatcher(group, "CONSUMER", namesrv_addr, customized_trace_topic, security)
            if enable_msg_trace
            else None
        )
        self.pull_batch_size = pull_batch_size
        self.allocate = strategy_named(allocate)
        self.auto_commit_interval_s = auto_commit_interval_s
        self.positions: dict[MessageQueue, int] = {}
        self.selectors: dict[str, MessageSelector] = {}  # per topic; the broker filters
        self._committed: dict[MessageQueue, int] = {}
        self._next_queue = 0
        self._auto_commit: asyncio.Task[None] | None = None
        self._rebalancing: asyncio.Task[None] | None = None
        self._rebalance_lock = asyncio.Lock()

    async def start(self) -> None:
        await self.instance.start()
        if self.tracer is not None:
            await self.tracer.start()
        if self.auto_commit_interval_s:
            self._auto_commit = asyncio.get_running_loop().create_task(
                run_every(self.auto_commit_interval_s, self.commit, f"auto-commit of group {self.group}")
            )

    async def close(self) -> None:
        if self._rebalancing is not None:
            await stop_tasks([self._rebalancing], f"pull consumer {self.group}")
        self.instance.rebalance_hooks.pop(self.group, None)
        if self._auto_commit is not None:
            await stop_tasks([self._auto_commit], f"pull consumer {self.group}")
            await self.commit()
        await self.instance.close()
        if self.tracer is not None:
            await self.tracer.close()

    async def __aenter__(self) -> AsyncPullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- assignment and positions ------------------------------------------------------------
    async def queues_of(self, topic: str) -> list[MessageQueue]:
        return (await self.instance.route(topic)).subscribe_queues()

    async def assign(self, queues: Sequence[MessageQueue]) -> None:
        """Read exactly these queues, each from the group's committed offset (0 when none)."""
        for queue in queues:
            if queue.topic not in self.instance.routes:
                await self.instance.route(queue.topic)
            if queue not in self.positions:
                self.positions[queue] = max(await self.committed(queue), 0)

    async def subscribe(self, topic: str, selector: str | MessageSelector = "*") -> None:
        """Read this member's share of ``topic``'s queues, only messages ``selector`` accepts (tags or SQL92)."""
        self.selectors[topic] = MessageSelector.of(selector)
        await self.instance.route(topic)
        if self._rebalancing is None:
            self.instance.consumer_data[self.group] = self._consumer_data
            self.instance.rebalance_hooks[self.group] = self.rebalance
            self._rebalancing = asyncio.get_running_loop().create_task(
                run_every(REBALANCE_INTERVAL_S, self.rebalance, f"lite pull consumer {self.group}")
            )
        await self.instance.heartbeat()
        await self.rebalance()

    def _consumer_data(self) -> ConsumerData:
        subs = tuple(selector.subscription_data(topic) for topic, selector in sorted(self.selectors.items()))
        return ConsumerData(
            self.group,
            ConsumeType.CONSUME_ACTIVELY,
            MessageModel.CLUSTERING,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            subs,
        )

    async def rebalance(self) -> None:
        """Take this member's share of every subscribed topic (``allocate``) and let go of the rest."""
        async with self._rebalance_lock:
            wanted: set[MessageQueue] = set()
            for topic in self.selectors:
                queues = (await self.instance.route(topic, refresh=True)).subscribe_queues()
                ids = await self.instance.consumer_ids(self.group, queues[0].broker_name) if queues else []
                wanted.update(self.allocate(self.instance.client_id, queues, ids))
            gone = [q for q in self.positions if q.topic in self.selectors and q not in wanted]
            if gone and self.auto_commit_interval_s:
                await self.commit({q: self.positions[q] for q in gone})
            for queue in gone:
                del self.positions[queue]
            await self.assign(sorted(wanted - set(self.positions), key=lambda q: (q.topic, q.broker_name, q.queue_id)))

    def seek(self, queue: MessageQueue, offset: int) -> None:
        self.positions[queue] = offset

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        self.positions[queue] = await self.min_offset(queue)

    async def seek_to_end(self, queue: MessageQueue) -> None:
        self.positions[queue] = await self.max_offset(queue)

    # -- broker queries --------------------------------------------------------------------
    async def _offset_query(self, code: int, queue: MessageQueue, fields: dict[str, str]) -> int:
        response = check_response(await self.instance.invoke_queue_broker(queue, code, fields), f"offset of {queue}")
        return OffsetResponseHeader.from_fields(response.ext_fields).offset

    async def min_offset(self, queue: MessageQueue) -> int:
        return await self._offset_query(
            RequestCode.GET_MIN_OFFSET, queue, TopicQueueRequestHeader(queue.topic, queue.queue_id).to_fields()
        )

    async def max_offset(self, queue: MessageQueue) -> int:
        return await self._offset_query(
            RequestCode.GET_MAX_OFFSET, queue, TopicQueueRequestHeader(queue.topic, queue.queue_id).to_fields()
        )

    async def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset of ``queue`` on the broker, -1 when there is none."""
        fields = QueryConsumerOffsetRequestHeader(self.group, queue.topic, queue.queue_id).to_fields()
        response = await self.instance.invoke_queue_broker(queue, RequestCode.QUERY_CONSUMER_OFFSET, fields)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return OffsetResponseHeader.from_fields(
            check_response(response, f"committed offset of {queue}").ext_fields
        ).offset

    # -- reading ---------------------------------------------------------------------------
    async def pull_raw(
        self,
        queue: MessageQueue,
        offset: int,
        max_messages: int,
        suspend_s: float = 0.0,
        expression: str | MessageSelector = "*",
    ) -> PullResult:
        """One PULL_MESSAGE: records from ``offset`` as one buffer (long-polls up to ``suspend_s``);
        ``expression`` is a tag expression or a :class:`MessageSelector`."""
        response = await self.instance.invoke_queue_broker(
            queue,
            RequestCode.PULL_MESSAGE,
            pull_request_fields(self.group, queue, offset, max_messages, suspend_s, expression),
            timeout=suspend_s + PULL_TIMEOUT_MARGIN_S,
        )
        return self.pull_result(queue, offset, response)

    def pull_result(self, queue: MessageQueue, offset: int, response: RemotingCommand) -> PullResult:
        """A PULL_MESSAGE response as a PullResult; an error code other than the pull's own raises.
        Notes the broker the response suggests for the queue's next pull."""
        result, suggested = decode_pull(queue, offset, response)
        self.instance.suggested_broker[queue] = suggested  # the next pull's broker
        return result

    async def poll(self, timeout_s: float = 1.0, max_messages: int | None = None) -> list[ReceivedMessage]:
        """Messages from the next queue that has any, advancing its position; [] after ``timeout_s``.

        A subscribed member that holds no queue right now (more members than queues) waits and gets [].
        """
        if not self.positions and not self.selectors:
            raise SparkmqError("poll before assign/subscribe: no queue to read")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            queues = list(self.positions)  # a rebalance may change them between pulls
            for queue in queues:
                queue = queues[self._next_queue % len(queues)]
                self._next_queue += 1
                messages = await self._pull_next(queue, max_messages, 0.0)
                if messages:
                    return messages
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            if not queues:
                await asyncio.sleep(min(remaining, 0.5))
                continue
            queue = queues[self._next_queue % len(queues)]
            messages = await self._pull_next(queue, max_messages, min(remaining, 0.5 if len(queues) > 1 else remaining))
            if messages:
                self._next_queue += 1
                return messages

    async def _pull_next(
        self, queue: MessageQueue, max_messages: int | None, suspend_s: float
    ) -> list[ReceivedMessage]:
        """Pull ``queue`` at its position and advance it, unless a rebalance took the queue meanwhile."""
        offset = self.positions.get(queue)
        if offset is None:
            return []
        result = await self.pull_raw(
            queue, offset, max_messages or self.pull_batch_size, suspend_s, self.selectors.get(queue.topic, "*")
        )
        if result.status == ResponseCode.PULL_OFFSET_MOVED:
            logger.warning("offset %d of %s moved to %d", offset, queue, result.next_begin_offset)
        if self.positions.get(queue) != offset:
            return []  # taken away (or moved by seek) while the pull was out
        self.positions[queue] = result.next_begin_offset
        if not result.found:
            return []
        messages = decode_pull_body(result.body, queue.broker_name)
        if self.tracer is not None:  # as Java's lite pull consumer: a pulled message counts as consumed
            before = trace_hooks.consume_started(self.tracer, self.group, messages)
            if before is not None:
                trace_hooks.consume_ended(self.tracer, before, True, CONSUME_SUCCESS, len(messages))
        return messages

    # -- committing ------------------------------------------------------------------------
    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Store positions (or ``offsets``) in the broker's offset manager.

        The queues' updates go out together, not one round trip after another: a member taking
        over a queue at a rebalance reads the committed offset, and the sooner it is stored the
        less that member consumes again. The first failure is raised once all have finished.
        """
        changed = {q: o for q, o in (offsets or self.positions).items() if self._committed.get(q) != o}
        outcomes = await asyncio.gather(*(self._commit_one(q, o) for q, o in changed.items()), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def _commit_one(self, queue: MessageQueue, offset: int) -> None:
        fields = UpdateConsumerOffsetRequestHeader(self.group, queue.topic, queue.queue_id, offset).to_fields()
        check_response(
            await self.instance.invoke_queue_broker(queue, RequestCode.UPDATE_CONSUMER_OFFSET, fields),
            f"commit {queue}",
        )
        self._committed[queue] = offset


class PullConsumer:
    """The blocking pull consumer (``AsyncPullConsumer`` on the process's client loop)."""

    def __init__(self, group: str, namesrv_addr: str, **options: Any) -> None:
        self._async = AsyncPullConsumer(group, namesrv_addr, **options)

    def start(self) -> None:
        loop_thread.run(self._async.start())

    def close(self) -> None:
        loop_thread.run(self._async.close())

    def __enter__(self) -> PullConsumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def positions(self) -> dict[MessageQueue, int]:
        return dict(self._async.positions)

    @property
    def tracer(self) -> TraceDispatcher | None:
        """The trace dispatcher (``enable_msg_trace``): its ``sent``, ``failed`` and ``dropped`` counts."""
        return self._async.tracer

    def queues_of(self, topic: str) -> list[MessageQueue]:
        return loop_thread.run(self._async.queues_of(topic))

    def assign(self, queues: Sequence[MessageQueue]) -> None:
        loop_thread.run(self._async.assign(queues))

    def subscribe(self, topic: str, selector: str | MessageSelector = "*") -> None:
        loop_thread.run(self._async.subscribe(topic, selector))

    def poll(self, timeout_s: float = 1.0, max_messages: int | None = None) -> list[ReceivedMessage]:
        return loop_thread.run(self._async.poll(timeout_s, max_messages))

    def pull_raw(
        self,
        queue: MessageQueue,
        offset: int,
        max_messages: int,
        suspend_s: float = 0.0,
        expression: str | MessageSelector = "*",
    ) -> PullResult:
        return loop_thread.run(self._async.pull_raw(queue, offset, max_messages, suspend_s, expression))

    def seek(self, queue: MessageQueue, offset: int) -> None:
        self._async.seek(queue, offset)

    def seek_to_begin(self, queue: MessageQueue) -> None:
        loop_thread.run(self._async.seek_to_begin(queue))

    def seek_to_end(self, queue: MessageQueue) -> None:
        loop_thread.run(self._async.seek_to_end(queue))

    def committed(self, queue: MessageQueue) -> int:
        return loop_thread.run(self._async.committed(queue))

    def min_offset(self, queue: MessageQueue) -> int:
        return loop_thread.run(self._async.min_offset(queue))

    def max_offset(self, queue: MessageQueue) -> int:
        return loop_thread.run(self._async.max_offset(queue))

    def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        loop_thread.run(self._async.commit(offsets))

    def commit_async(self, offsets: dict[MessageQueue, int] | None = None) -> Future[None]:
        """Commit without waiting; a concurrent future."""
        return loop_thread.submit(self._async.commit(offsets))
