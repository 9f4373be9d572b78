"""Push consumers: ``AsyncPushConsumer`` and the blocking ``PushConsumer``.

The group's queues are split among its members (rebalance every 20 s and whenever the
broker says the members changed); each assigned queue has a pull loop with flow control
(``pull_service``); the consume services (``consume_service``) run the listener on a thread pool. Concurrent mode
hands messages to the pool as they come and sends failures back for a delayed retry; orderly
mode locks each queue on the broker and consumes it strictly in order, suspending (never
skipping) a failing queue. Offsets go to the broker every 5 s and at shutdown (CLUSTERING) or
to a local file (BROADCASTING). A group with no committed offset starts where
``consume_from_where`` says (RocketMQ's ``computePullFromWhere``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from sparkmq.client import loop_thread
from sparkmq.client.consume_service import (
    ORDERLY_SUSPEND_S,
    ConcurrentConsumeService,
    Listener,
    ListenerRunner,
    OrderlyConsumeService,
)
from sparkmq.client.local_offsets import LocalOffsetFile
from sparkmq.client.message import ReceivedMessage
from sparkmq.client.process_queue import ProcessQueue
from sparkmq.client.producer import trace_dispatcher
from sparkmq.client.pull_consumer import AsyncPullConsumer
from sparkmq.client.pull_service import FlowControl, PullService, first_offset
from sparkmq.client.rebalance import AllocateStrategy, allocate_averagely, strategy_named
from sparkmq.client.security import ClientSecurity
from sparkmq.client.selector import MessageSelector
from sparkmq.client.trace_dispatcher import TraceDispatcher
from sparkmq.errors import ConfigError, SparkmqError
from sparkmq.message.names import is_retry_topic, retry_topic
from sparkmq.message.properties import RETRY_TOPIC
from sparkmq.protocol import DEFAULT_VERSION, MQVersion
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.heartbeat import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel
from sparkmq.protocol.running_info import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_NAMESERVER_ADDR,
    PROP_THREADPOOL_CORE_SIZE,
    ConsumerRunningInfo,
    ProcessQueueInfo,
)
from sparkmq.remoting.periodic import run_every, stop_tasks
from sparkmq.remoting.waits import acquire_within

logger = logging.getLogger(__name__)
REBALANCE_INTERVAL_S = 20.0
PERSIST_INTERVAL_S = 5.0
LOCK_INTERVAL_S = 20.0
CONSUME_TIMESTAMP_BACK_S = 30 * 60  # consumeTimestamp defaults to half an hour ago
DROP_CONSUME_WAIT_S = 1.0  # RebalanceImpl's consume-lock tryLock(1000) when an orderly queue is removed
LOCK_RETRY_S = 1.0  # an orderly queue still locked by its previous owner is tried again this soon (then 2 s, 4 s, ...)
CLOSE_CONSUME_WAIT_S = 10.0


_FROM_WHERE = frozenset(
    {
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
    }
)


class AsyncPushConsumer:
    """Receives the messages of subscribed topics and hands each to ``listener``.

    For example::

        consumer = AsyncPushConsumer("CID_orders", "127.0.0.1:9876")
        consumer.subscribe("orders", "books || games", handle)   # handle(msg) -> ConsumeResult.SUCCESS
        await consumer.start(); ...; await consumer.close()

    Options (DefaultMQPushConsumer's, in snake case): ``consume_from_where`` and
    ``consume_timestamp_ms`` (where a group without a committed offset starts: LAST_OFFSET, the
    default, FIRST_OFFSET, or TIMESTAMP, half an hour ago unless given);
    ``consume_message_batch_max_size`` (above 1 the listener gets a list); flow control per queue
    by ``pull_threshold_for_queue`` messages, ``pull_threshold_size_for_queue_mib`` of bodies and
    ``consume_concurrently_max_span`` offsets; ``consume_timeout_s``; ``max_reconsume_times``
    (None: 16 for concurrent consumers, unlimited retries for orderly ones);
    ``suspend_current_queue_time_s`` (how long an orderly queue waits before retrying a failure);
    ``enable_msg_trace`` and ``customized_trace_topic``: SubBefore / SubAfter trace records of every
    listener call, sent to ``RMQ_SYS_TRACE_TOPIC`` (or that topic) by a background producer.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        orderly: bool = False,
        allocate: AllocateStrategy | str = allocate_averagely,
        consume_threads: int = 4,
        pull_batch_size: int = 32,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp_ms: int | None = None,
        consume_message_batch_max_size: int = 1,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue_mib: int = 100,
        consume_concurrently_max_span: int = 2000,
        consume_timeout_s: float = 15 * 60,
        max_reconsume_times: int | None = None,
        suspend_current_queue_time_s: float = ORDERLY_SUSPEND_S,
        offset_dir: Path | None = None,
        instance_name: str | None = None,
        security: ClientSecurity | None = None,
        enable_msg_trace: bool = False,
        customized_trace_topic: str | None = None,
    ) -> None:
        if consume_from_where not in _FROM_WHERE:
            raise ConfigError(f"consume_from_where must be one of {sorted(w.name for w in _FROM_WHERE)}")
        self.group = group
        self.message_model = message_model
        self.orderly = orderly
        self.allocate = strategy_named(allocate)
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms or int((time.time() - CONSUME_TIMESTAMP_BACK_S) * 1000)
        self.max_reconsume_times = max_reconsume_times
        self.suspend_current_queue_time_s = suspend_current_queue_time_s
        self._consume_threads = consume_threads
        self._started_ms = 0
        self._reader = AsyncPullConsumer(
            group, namesrv_addr, auto_commit_interval_s=None, instance_name=instance_name, security=security
        )
        self.instance = self._reader.instance
        self._subscriptions: dict[str, tuple[MessageSelector, Listener]] = {}
        self._runner = ListenerRunner(
            group,
            consume_threads,
            consume_timeout_s,
            consume_message_batch_max_size,
            self._listener_of,
            lambda: self._closing,
            trace_dispatcher(group, "CONSUMER", namesrv_addr, customized_trace_topic, security)
            if enable_msg_trace
            else None,
        )
        self._queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._consume_tasks: set[asyncio.Task[None]] = set()
        self.offsets: dict[MessageQueue, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_lock = asyncio.Lock()
        self._closing = False
        self._orderly: OrderlyConsumeService | None = None
        self._service: ConcurrentConsumeService | OrderlyConsumeService
        if orderly:
            self._service = self._orderly = OrderlyConsumeService(
                self._runner,
                self.instance,
                max_reconsume_times=max_reconsume_times,
                suspend_s=suspend_current_queue_time_s,
                offsets=self.offsets,
            )
        else:
            self._service = ConcurrentConsumeService(
                self._runner,
                self.instance,
                clustering=message_model is MessageModel.CLUSTERING,
                max_reconsume_times=max_reconsume_times,
                offsets=self.offsets,
            )
        flow = FlowControl(
            pull_threshold_for_queue,
            pull_threshold_size_for_queue_mib * 1024 * 1024,
            None if orderly else consume_concurrently_max_span,
        )
        self._puller = PullService(
            self._reader, pull_batch_size, flow, self.offsets, self._service.consume, self._spawn
        )
        self._retry_task: asyncio.Task[None] | None = None
        self._retry_delay_s = LOCK_RETRY_S
        # BROADCASTING keeps offsets in a local file. Named after ``instance_name`` when given, so a
        # restarted consumer finds it; the client id carries a random part and would never match.
        owner = instance_name or self.instance.client_id
        self._offset_file = (
            LocalOffsetFile((offset_dir or Path.home() / ".sparkmq_offsets") / f"{owner}-{group}.json")
            if message_model is MessageModel.BROADCASTING
            else None
        )

    def subscribe(self, topic: str, expression: str | MessageSelector, listener: Listener) -> None:
        """Receive ``topic`` messages matching ``expression``: tags (``"*"``, ``"TagA || TagB"``) or a
        :class:`MessageSelector` (``MessageSelector.by_sql("a > 5")``)."""
        self._subscriptions[topic] = (MessageSelector.of(expression), listener)

    def _topics(self) -> dict[str, tuple[MessageSelector, Listener]]:
        topics = dict(self._subscriptions)
        if self.message_model is MessageModel.CLUSTERING and self._subscriptions:
            first_listener = next(iter(self._subscriptions.values()))[1]
            topics.setdefault(retry_topic(self.group), (MessageSelector(), first_listener))
        return topics

    def _consumer_data(self) -> ConsumerData:
        subs = tuple(selector.subscription_data(t) for t, (selector, _listener) in sorted(self._topics().items()))
        return ConsumerData(
            self.group, ConsumeType.CONSUME_PASSIVELY, self.message_model, self.consume_from_where, subs
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if not self._subscriptions:
            raise ConfigError("subscribe to at least one topic before start()")
        self.instance.consumer_data[self.group] = self._consumer_data
        self.instance.rebalance_hooks[self.group] = self._members_changed
        self.instance.reset_hooks[self.group] = self.reset_offsets
        self.instance.running_info_hooks[self.group] = self.running_info
        self._started_ms = int(time.time() * 1000)
        await self.instance.start()
        if self._runner.tracer is not None:
            await self._runner.tracer.start()
        for topic in self._topics():
            try:
                await self.instance.route(topic)
            except SparkmqError as exc:
                logger.info("no route for %s yet: %s", topic, exc.remark)  # %RETRY%group of a new group
        if self._offset_file is not None:
            self.offsets.update(self._offset_file.load())
        await self.instance.heartbeat()
        await self.rebalance()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(run_every(REBALANCE_INTERVAL_S, self.rebalance, f"consumer {self.group}")),
            loop.create_task(run_every(PERSIST_INTERVAL_S, self.persist_offsets, f"consumer {self.group}")),
        ]
        if self.orderly:
            self._tasks.append(loop.create_task(run_every(LOCK_INTERVAL_S, self._relock, f"consumer {self.group}")))

    async def close(self) -> None:
        """Stop pulling, finish what is being consumed, persist offsets, unlock, unregister.

        Messages already handed to the pool are finished (up to ``CLOSE_CONSUME_WAIT_S``) and
        their offsets persisted *before* the queues are unlocked and the client unregisters,
        so the members that take the queues over do not consume them again.
        """
        self.instance.rebalance_hooks.pop(self.group, None)
        self.instance.reset_hooks.pop(self.group, None)
        self.instance.running_info_hooks.pop(self.group, None)
        tasks = self._tasks + ([self._retry_task] if self._retry_task is not None else [])
        await stop_tasks(tasks, f"push consumer {self.group}")
        async with self._rebalance_lock:
            pulls = list(self._pull_tasks.values())
            self._pull_tasks.clear()
            await stop_tasks(pulls, f"push consumer {self.group}")
            self._closing = True  # listener calls not started yet are skipped, running ones finish
            if self._consume_tasks:
                await asyncio.wait(self._consume_tasks, timeout=CLOSE_CONSUME_WAIT_S)
            for process in self._queues.values():
                process.dropped = True
            await self.persist_offsets()
            queues = list(self._queues)
            self._queues.clear()
            if self._orderly is not None:
                for queue in queues:
                    await self._orderly.unlock([queue])
        if self._retry_task is not None:  # scheduled by a rebalance that ran while close waited for the lock
            await stop_tasks([self._retry_task], f"push consumer {self.group}")
        self.instance.consumer_data.pop(self.group, None)
        await self.instance.close()
        self._runner.shutdown()
        if self._runner.tracer is not None:
            await self._runner.tracer.close()

    async def __aenter__(self) -> AsyncPushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- rebalance -------------------------------------------------------------------------
    async def _members_changed(self) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED: persist offsets first, then rebalance.

        A member taking over one of our queues starts at the broker's committed offset; storing
        ours now (not at the next 5 s persist) keeps what it consumes again to the few messages
        consumed between this persist and our drop of the queue.
        """
        if self.message_model is MessageModel.CLUSTERING:
            await self.persist_offsets()
        await self.rebalance()

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (an admin's resetOffsetByTime), as Java's
        ``MQClientInstance.resetOffset``: this member's queues of ``topic`` stop pulling, what they
        cached is dropped unconsumed, their offsets become ``offsets`` (persisted at once) and
        pulling resumes from there. Queues other members hold are theirs to move."""
        async with self._rebalance_lock:
            if self._closing:
                return
            moved = sorted((q for q in self._queues if q.topic == topic and q in offsets), key=lambda q: q.queue_id)
            for queue in moved:
                await self._drop(queue, persist=False)
            for queue in moved:
                self.offsets[queue] = offsets[queue]
            await self.persist_offsets(moved)
            for queue in moved:
                await self._take(queue)
            logger.info("consumer %s: %d queues of %s reset by an admin", self.group, len(moved), topic)

    async def rebalance(self) -> None:
        """Recompute this member's queues and start/stop their pull loops.

        A topic whose route or member list cannot be read keeps the queues it has (RocketMQ's
        ``rebalanceByTopic`` leaves the assignment alone), so a NameServer hiccup never stops
        consumption.
        """
        async with self._rebalance_lock:
            if self._closing:
                return
            wanted: set[MessageQueue] = set()
            missing = False
            for topic in self._topics():
                try:
                    queues = (await self.instance.route(topic, refresh=True)).subscribe_queues()
                    if self.message_model is MessageModel.BROADCASTING:
                        wanted.update(queues)
                        continue
                    ids = await self._member_ids(queues)
                except SparkmqError as exc:
                    logger.info("rebalance of %s keeps its queues of %s: %s", self.group, topic, exc.remark)
                    wanted.update(q for q in self._queues if q.topic == topic)
                    # e.g. %RETRY%group: the broker creates it at our first heartbeat and the
                    # NameServer learns of it a moment later
                    missing = True
                    continue
                wanted.update(self.allocate(self.instance.client_id, queues, ids))
            for queue in [q for q in self._queues if q not in wanted]:
                await self._drop(queue)
            for queue in sorted(wanted - set(self._queues), key=lambda q: (q.topic, q.broker_name, q.queue_id)):
                try:
                    missing |= not await self._take(queue)
                except SparkmqError as exc:
                    logger.warning("consumer %s cannot take %s yet: %s", self.group, queue, exc.remark)
                    missing = True
            if missing:
                self._rebalance_soon()
            else:
                self._retry_delay_s = LOCK_RETRY_S

    def _rebalance_soon(self) -> None:
        """Try again shortly (a route not there yet, a queue not locked or not started) rather than at
        the next periodic pass; the delay doubles while something stays missing."""
        if self._retry_task is None or self._retry_task.done():
            delay = self._retry_delay_s
            self._retry_delay_s = min(delay * 2, REBALANCE_INTERVAL_S)
            self._retry_task = asyncio.get_running_loop().create_task(self._rebalance_later(delay))

    async def _rebalance_later(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        self._retry_task = None  # this rebalance may schedule the next try
        try:
            await self.rebalance()
        except SparkmqError as exc:
            logger.warning("consumer %s: rebalance failed: %s", self.group, exc.remark)

    async def _member_ids(self, queues: list[MessageQueue]) -> list[str]:
        return await self.instance.consumer_ids(self.group, queues[0].broker_name) if queues else []

    async def _take(self, queue: MessageQueue) -> bool:
        """Start pulling ``queue``; False when an orderly queue is still locked by another member."""
        if self._orderly is not None and not await self._orderly.lock([queue]):
            return False  # another member still holds it; tried again shortly
        offset = self.offsets.get(queue, -1)
        if offset < 0 and self.message_model is MessageModel.CLUSTERING:
            offset = await self._reader.committed(queue)
        if offset < 0:
            offset = await first_offset(
                self.instance, self._reader, queue, self.consume_from_where, self.consume_timestamp_ms
            )
        self.offsets[queue] = offset
        process = self._queues[queue] = ProcessQueue()
        process.locked = self.orderly
        selector = self._topics()[queue.topic][0]
        self._pull_tasks[queue] = asyncio.get_running_loop().create_task(
            self._puller.pull_loop(queue, process, offset, selector)
        )
        return True

    async def _drop(self, queue: MessageQueue, persist: bool = True) -> None:
        """Stop pulling ``queue`` and hand it back: persist its offset, forget it, unlock it (orderly).

        Orderly: the message being consumed is finished first (up to ``DROP_CONSUME_WAIT_S``, like
        RocketMQ's consume-lock ``tryLock``) and its offset persisted, so the next owner starts
        right after it — nothing is consumed twice and the order holds across the move.
        """
        process = self._queues.pop(queue)
        process.dropped = True  # no further message starts
        task = self._pull_tasks.pop(queue)
        await stop_tasks([task], f"push consumer {self.group}")
        consume_lock = self._orderly.consume_lock(queue) if self._orderly is not None else None
        holding = False
        if consume_lock is not None:
            holding = await acquire_within(consume_lock, DROP_CONSUME_WAIT_S)
            if not holding:
                logger.warning(
                    "%s: a listener call on %s is still running; releasing the queue anyway", self.group, queue
                )
        try:
            if persist:
                await self.persist_offsets([queue])
            if self.message_model is MessageModel.CLUSTERING:
                # The next owner may move it on: if it comes back, start from the broker's committed
                # offset (RocketMQ's removeOffset), not from what this member had consumed back then.
                self.offsets.pop(queue, None)
            process.locked = False  # a listener call still running no longer records its offset
            if self._orderly is not None:
                await self._orderly.unlock([queue])
        finally:
            if holding:
                assert consume_lock is not None
                consume_lock.release()

    # -- pulling and consuming -------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._consume_tasks.add(task)
        task.add_done_callback(self._consume_tasks.discard)

    def _listener_of(self, message: ReceivedMessage) -> Listener:
        topic = message.properties.get(RETRY_TOPIC, message.topic) if is_retry_topic(message.topic) else message.topic
        return self._topics().get(topic, self._topics()[message.topic])[1]

    # -- locks (orderly) -------------------------------------------------------------------
    async def _relock(self) -> None:
        assert self._orderly is not None, "only orderly consumers relock"
        async with self._rebalance_lock:  # never races a rebalance dropping the same queue
            for queue in list(self._queues):
                if not self._closing and not await self._orderly.lock([queue]):
                    logger.warning("lost the lock of %s; dropping it", queue)
                    await self._drop(queue, persist=True)

    # -- offsets ---------------------------------------------------------------------------
    async def persist_offsets(self, queues: list[MessageQueue] | None = None) -> None:
        chosen = {q: o for q, o in self.offsets.items() if queues is None or q in queues}
        if self._offset_file is not None:
            try:
                self._offset_file.save(self.offsets)
            except SparkmqError as exc:
                logger.warning("persisting offsets of %s failed: %s", self.group, exc.remark)
            return
        try:
            await self._reader.commit(chosen)
        except SparkmqError as exc:
            logger.warning("persisting offsets of %s failed: %s", self.group, exc.remark)

    def running_info(self) -> ConsumerRunningInfo:
        """What GET_CONSUMER_RUNNING_INFO reports: settings, subscriptions and each held queue."""
        properties = {
            PROP_NAMESERVER_ADDR: ";".join(self.instance.namesrv_addresses),
            PROP_CONSUME_TYPE: ConsumeType.CONSUME_PASSIVELY.name,
            PROP_CONSUME_ORDERLY: str(self.orderly).lower(),
            PROP_THREADPOOL_CORE_SIZE: str(self._consume_threads),
            PROP_CLIENT_VERSION: MQVersion(DEFAULT_VERSION).name,
            PROP_CONSUMER_START_TIMESTAMP: str(self._started_ms),
        }
        table = {
            queue: ProcessQueueInfo(
                commit_offset=self.offsets.get(queue, -1),
                cached_msg_min_offset=process.committable() if len(process) else 0,
                cached_msg_max_offset=max(process.max_pulled, 0),
                cached_msg_count=len(process),
                cached_msg_size_in_mib=process.cached_bytes >> 20,
                locked=process.locked,
                droped=process.dropped,
            )
            for queue, process in self._queues.items()
        }
        return ConsumerRunningInfo(properties, self._consumer_data().subscription_data_set, table)

    @property
    def assigned(self) -> list[MessageQueue]:
        return sorted(self._queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))

    @property
    def cached_message_count(self) -> int:
        """Messages pulled and not yet consumed, over all queues (what flow control bounds)."""
        return sum(len(process) for process in self._queues.values())

    @property
    def tracer(self) -> TraceDispatcher | None:
        """The trace dispatcher (``enable_msg_trace``): its ``sent``, ``failed`` and ``dropped`` counts."""
        return self._runner.tracer


class PushConsumer:
    """The blocking push consumer: ``AsyncPushConsumer`` on the process's client loop.

    For example::

        consumer = PushConsumer("CID_orders", "127.0.0.1:9876")
        def handle(message): print(message.body); return ConsumeResult.SUCCESS
        consumer.subscribe("orders", "*", handle)
        consumer.start(); ...; consumer.close()
    """

    def __init__(self, group: str, namesrv_addr: str, **options: Any) -> None:
        self._options = options
        self._args = (group, namesrv_addr)
        self._subscriptions: list[tuple[str, str | MessageSelector, Listener]] = []
        self._async: AsyncPushConsumer | None = None

    def subscribe(self, topic: str, expression: str | MessageSelector, listener: Listener) -> None:
        """Receive ``topic`` messages matching a tag expression or a :class:`MessageSelector`."""
        self._subscriptions.append((topic, expression, listener))

    def start(self) -> None:
        async def build_and_start() -> AsyncPushConsumer:
            consumer = AsyncPushConsumer(*self._args, **self._options)
            for topic, expression, listener in self._subscriptions:
                consumer.subscribe(topic, expression, listener)
            await consumer.start()
            return consumer

        self._async = loop_thread.run(build_and_start())

    def close(self) -> None:
        if self._async is not None:
            loop_thread.run(self._async.close())

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def assigned(self) -> list[MessageQueue]:
        return self._async.assigned if self._async else []

    @property
    def cached_message_count(self) -> int:
        return self._async.cached_message_count if self._async else 0

    @property
    def tracer(self) -> TraceDispatcher | None:
        """The trace dispatcher (``enable_msg_trace``): its ``sent``, ``failed`` and ``dropped`` counts."""
        return self._async.tracer if self._async else None
