"""Push consumers: ``AsyncPushConsumer`` and the blocking ``PushConsumer``.

The group's queues are split among its members (rebalance every 20 s and whenever the
broker says the members changed); each assigned queue has a pull loop with flow control;
a thread pool runs the listener. Concurrent mode hands messages to the pool as they come
and sends failures back for a delayed retry; orderly mode locks each queue on the broker
and consumes it strictly in order in one thread at a time. Offsets go to the broker every
5 s and at shutdown (CLUSTERING) or to a local file (BROADCASTING).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sparkmq.client import loop_thread
from sparkmq.client.instance import check_response
from sparkmq.client.message import ReceivedMessage, decode_pull_body
from sparkmq.remoting.periodic import run_every, stop_tasks
from sparkmq.client.process_queue import ProcessQueue
from sparkmq.client.pull_consumer import AsyncPullConsumer
from sparkmq.client.rebalance import AllocateStrategy, allocate_averagely
from sparkmq.errors import SparkmqError
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.bodies import ConsumerListBody, LockBatchRequestBody, LockBatchResponseBody, MessageQueue
from sparkmq.protocol.headers import ConsumerGroupRequestHeader, ConsumerSendMsgBackRequestHeader
from sparkmq.protocol.heartbeat import ConsumeFromWhere, ConsumerData, ConsumeType, MessageModel, SubscriptionData

logger = logging.getLogger(__name__)
REBALANCE_INTERVAL_S = 20.0
PERSIST_INTERVAL_S = 5.0
LOCK_INTERVAL_S = 20.0
PULL_SUSPEND_S = 15.0
FLOW_CONTROL_PAUSE_S = 1.0
RETRY_LATER_S = 5.0
ORDERLY_SUSPEND_S = 1.0
DROP_CONSUME_WAIT_S = 1.0  # RebalanceImpl's consume-lock tryLock(1000) when an orderly queue is removed
LOCK_RETRY_S = 1.0  # an orderly queue still locked by its previous owner is tried again this soon (then 2 s, 4 s, ...)
CLOSE_CONSUME_WAIT_S = 10.0


class ConsumeResult(enum.Enum):
    """What a listener says of a message: consumed, or try again later."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[ReceivedMessage], "ConsumeResult | None"]


def retry_topic(group: str) -> str:
    return "%RETRY%" + group


class AsyncPushConsumer:
    """Receives the messages of subscribed topics and hands each to ``listener``.

    >>> # consumer = AsyncPushConsumer("CID_orders", "127.0.0.1:9876")
    >>> # consumer.subscribe("orders", "books || games", handle)   # handle(msg) -> None or ConsumeResult
    >>> # await consumer.start(); ...; await consumer.close()
    """

    def __init__(self, group: str, namesrv_addr: str, *, message_model: MessageModel = MessageModel.CLUSTERING,
                 orderly: bool = False, allocate: AllocateStrategy = allocate_averagely, consume_threads: int = 4,
                 pull_batch_size: int = 32, max_cached_per_queue: int = 1000, max_reconsume_times: int = 16,
                 offset_dir: Path | None = None, instance_name: str | None = None) -> None:
        self.group = group
        self.message_model = message_model
        self.orderly = orderly
        self.allocate = allocate
        self.pull_batch_size = pull_batch_size
        self.max_cached_per_queue = max_cached_per_queue
        self.max_reconsume_times = max_reconsume_times
        self._reader = AsyncPullConsumer(group, namesrv_addr, auto_commit_interval_s=None, instance_name=instance_name)
        self.instance = self._reader.instance
        self._subscriptions: dict[str, tuple[str, Listener]] = {}
        self._executor = ThreadPoolExecutor(consume_threads, thread_name_prefix=f"sparkmq-consume-{group}")
        self._queues: dict[MessageQueue, ProcessQueue] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._consume_tasks: set[asyncio.Task[None]] = set()
        self.offsets: dict[MessageQueue, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_lock = asyncio.Lock()
        self._closing = False
        self._orderly_locks: dict[MessageQueue, asyncio.Lock] = {}
        self._retry_task: asyncio.Task[None] | None = None
        self._retry_delay_s = LOCK_RETRY_S
        # BROADCASTING keeps offsets in a local file. Named after ``instance_name`` when given, so a
        # restarted consumer finds it; the client id carries a random part and would never match.
        owner = instance_name or self.instance.client_id
        self._offset_file = (offset_dir or Path.home() / ".sparkmq_offsets") / f"{owner}-{group}.json" \
            if message_model is MessageModel.BROADCASTING else None

    def subscribe(self, topic: str, expression: str, listener: Listener) -> None:
        """Receive ``topic`` messages matching ``expression`` (``"*"``, ``"TagA || TagB"``)."""
        self._subscriptions[topic] = (expression or "*", listener)

    def _topics(self) -> dict[str, tuple[str, Listener]]:
        topics = dict(self._subscriptions)
        if self.message_model is MessageModel.CLUSTERING and self._subscriptions:
            first_listener = next(iter(self._subscriptions.values()))[1]
            topics.setdefault(retry_topic(self.group), ("*", first_listener))
        return topics

    def _consumer_data(self) -> ConsumerData:
        subs = tuple(SubscriptionData(t, expr, tuple(x.strip() for x in expr.split("||")) if expr != "*" else ())
                     for t, (expr, _listener) in sorted(self._topics().items()))
        return ConsumerData(self.group, ConsumeType.CONSUME_PASSIVELY, self.message_model,
                            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET, subs)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if not self._subscriptions:
            raise SparkmqError("subscribe to at least one topic before start()")
        self.instance.consumer_data[self.group] = self._consumer_data
        self.instance.rebalance_hooks[self.group] = self._members_changed
        await self.instance.start()
        for topic in self._topics():
            try:
                await self.instance.route(topic)
            except SparkmqError as exc:
                logger.info("no route for %s yet: %s", topic, exc.remark)  # %RETRY%group of a new group
        self._load_local_offsets()
        await self.instance.heartbeat()
        await self.rebalance()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(run_every(REBALANCE_INTERVAL_S, self.rebalance, f"consumer {self.group}")),
                       loop.create_task(run_every(PERSIST_INTERVAL_S, self.persist_offsets, f"consumer {self.group}"))]
        if self.orderly:
            self._tasks.append(loop.create_task(run_every(LOCK_INTERVAL_S, self._relock, f"consumer {self.group}")))

    async def close(self) -> None:
        """Stop pulling, finish what is being consumed, persist offsets, unlock, unregister.

        Messages already handed to the pool are finished (up to ``CLOSE_CONSUME_WAIT_S``) and
        their offsets persisted *before* the queues are unlocked and the client unregisters,
        so the members that take the queues over do not consume them again.
        """
        self.instance.rebalance_hooks.pop(self.group, None)
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
            if self.orderly:
                for queue in queues:
                    await self._unlock([queue])
        if self._retry_task is not None:  # scheduled by a rebalance that ran while close waited for the lock
            await stop_tasks([self._retry_task], f"push consumer {self.group}")
        self.instance.consumer_data.pop(self.group, None)
        await self.instance.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

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
        if not queues:
            return []
        fields = ConsumerGroupRequestHeader(self.group).to_fields()
        response = await self.instance.invoke_broker(queues[0].broker_name, RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields)
        return list(ConsumerListBody.decode(check_response(response, "consumer list").body).consumer_id_list)

    async def _take(self, queue: MessageQueue) -> bool:
        """Start pulling ``queue``; False when an orderly queue is still locked by another member."""
        if self.orderly and not await self._lock([queue]):
            return False  # another member still holds it; tried again shortly
        offset = self.offsets.get(queue, -1)
        if offset < 0 and self.message_model is MessageModel.CLUSTERING:
            offset = await self._reader.committed(queue)
        if offset < 0:
            offset = 0 if queue.topic.startswith("%RETRY%") else await self._reader.max_offset(queue)
        self.offsets[queue] = offset
        process = self._queues[queue] = ProcessQueue()
        process.locked = self.orderly
        self._pull_tasks[queue] = asyncio.get_running_loop().create_task(self._pull_loop(queue, process, offset))
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
        consume_lock = self._queue_lock(queue) if self.orderly else None
        holding = False
        if consume_lock is not None:
            try:
                holding = await asyncio.wait_for(consume_lock.acquire(), DROP_CONSUME_WAIT_S)
            except TimeoutError:
                logger.warning("%s: a listener call on %s is still running; releasing the queue anyway", self.group, queue)
        try:
            if persist:
                await self.persist_offsets([queue])
            if self.message_model is MessageModel.CLUSTERING:
                # The next owner may move it on: if it comes back, start from the broker's committed
                # offset (RocketMQ's removeOffset), not from what this member had consumed back then.
                self.offsets.pop(queue, None)
            process.locked = False  # a listener call still running no longer records its offset
            if self.orderly:
                await self._unlock([queue])
        finally:
            if holding:
                assert consume_lock is not None
                consume_lock.release()

    # -- pulling and consuming -------------------------------------------------------------
    async def _pull_loop(self, queue: MessageQueue, process: ProcessQueue, offset: int) -> None:
        expression, _listener = self._topics()[queue.topic]
        while not process.dropped:
            if len(process) >= self.max_cached_per_queue:
                await asyncio.sleep(FLOW_CONTROL_PAUSE_S)
                continue
            try:
                result = await self._reader.pull_raw(queue, offset, self.pull_batch_size, PULL_SUSPEND_S, expression)
            except SparkmqError as exc:
                logger.warning("pull %s at %d failed: %s", queue, offset, exc.remark)
                await asyncio.sleep(RETRY_LATER_S / 5)
                continue
            if result.status == ResponseCode.PULL_OFFSET_MOVED:
                logger.warning("offset %d of %s moved to %d", offset, queue, result.next_begin_offset)
            offset = result.next_begin_offset
            if not result.found:
                if not len(process):
                    self.offsets[queue] = max(self.offsets.get(queue, 0), offset) if result.status != ResponseCode.PULL_OFFSET_MOVED else offset
                continue
            messages = decode_pull_body(result.body, queue.broker_name)
            if expression != "*":
                tags = {t.strip() for t in expression.split("||")}
                skipped = [m for m in messages if m.tags not in tags]
                messages = [m for m in messages if m.tags in tags]
                if not messages:
                    self.offsets[queue] = max(self.offsets.get(queue, 0), skipped[-1].queue_offset + 1)
                    continue
            process.add(messages)
            self._spawn(self._consume_orderly(queue, process, messages) if self.orderly
                        else self._consume_concurrently(queue, process, messages))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._consume_tasks.add(task)
        task.add_done_callback(self._consume_tasks.discard)

    def _listener_of(self, message: ReceivedMessage) -> Listener:
        topic = message.properties.get("RETRY_TOPIC", message.topic) if message.topic.startswith("%RETRY%") else message.topic
        return self._topics().get(topic, self._topics()[message.topic])[1]

    def _call(self, message: ReceivedMessage) -> bool | None:
        """Run the listener: True consumed, False to retry, None not run because the consumer is closing."""
        if self._closing:
            return None
        try:
            return self._listener_of(message)(message) in (None, ConsumeResult.SUCCESS)
        except Exception:  # the user's listener failed: the message is retried, the failure logged
            logger.exception("listener of %s failed on message %s", self.group, message.msg_id)
            return False

    async def _consume_concurrently(self, queue: MessageQueue, process: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(*(loop.run_in_executor(self._executor, self._call, m) for m in messages))
        for message, ok in zip(messages, results):
            if ok is False and self.message_model is MessageModel.CLUSTERING:
                while not await self._send_back(message) and not process.dropped:
                    await asyncio.sleep(RETRY_LATER_S)
        # Messages skipped at close stay in the process queue: the committed offset stops before them.
        committable = process.remove([m for m, ok in zip(messages, results) if ok is not None])
        if not process.dropped:
            self.offsets[queue] = max(self.offsets.get(queue, 0), committable)

    async def _consume_orderly(self, queue: MessageQueue, process: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        loop = asyncio.get_running_loop()
        async with self._queue_lock(queue):
            for message in messages:
                attempts = 0
                while not process.dropped:
                    outcome = await loop.run_in_executor(self._executor, self._call, message)
                    if outcome is None:
                        return  # closing: this message and the rest stay unconsumed and uncommitted
                    if outcome:
                        break
                    attempts += 1
                    if attempts > self.max_reconsume_times:
                        await self._send_back(message, delay_level=-1)  # to the DLQ
                        break
                    await asyncio.sleep(ORDERLY_SUSPEND_S)
                else:
                    return  # dropped before this message started
                # Consumed while this member still holds the queue's lock: record it even if the
                # queue is being dropped (the drop persists it before unlocking).
                if not process.locked:
                    return
                committable = process.remove([message])
                self.offsets[queue] = max(self.offsets.get(queue, 0), committable)
                if process.dropped:
                    return

    def _queue_lock(self, queue: MessageQueue) -> asyncio.Lock:
        return self._orderly_locks.setdefault(queue, asyncio.Lock())

    async def _send_back(self, message: ReceivedMessage, delay_level: int = 0) -> bool:
        fields = ConsumerSendMsgBackRequestHeader(message.commit_log_offset, self.group, delay_level, message.msg_id,
                                                  message.topic, False, self.max_reconsume_times).to_fields()
        try:
            response = await self.instance.remoting.invoke(message.store_host, RequestCode.CONSUMER_SEND_MSG_BACK, fields)
            check_response(response, "send back")
            return True
        except SparkmqError as exc:
            logger.warning("send back of %s failed: %s", message.msg_id, exc.remark)
            return False

    # -- locks (orderly) -------------------------------------------------------------------
    async def _lock(self, queues: list[MessageQueue]) -> bool:
        body = LockBatchRequestBody(self.group, self.instance.client_id, tuple(queues)).encode()
        response = await self.instance.invoke_broker(queues[0].broker_name, RequestCode.LOCK_BATCH_MQ, {}, body)
        held = LockBatchResponseBody.decode(check_response(response, "lock queues").body).lock_ok_mq_set
        return set(queues) <= set(held)

    async def _unlock(self, queues: list[MessageQueue]) -> None:
        body = LockBatchRequestBody(self.group, self.instance.client_id, tuple(queues)).encode()
        try:
            await self.instance.invoke_broker(queues[0].broker_name, RequestCode.UNLOCK_BATCH_MQ, {}, body)
        except SparkmqError as exc:
            logger.warning("unlock of %s failed: %s", queues, exc.remark)

    async def _relock(self) -> None:
        async with self._rebalance_lock:  # never races a rebalance dropping the same queue
            for queue in list(self._queues):
                if not self._closing and not await self._lock([queue]):
                    logger.warning("lost the lock of %s; dropping it", queue)
                    await self._drop(queue, persist=True)

    # -- offsets ---------------------------------------------------------------------------
    async def persist_offsets(self, queues: list[MessageQueue] | None = None) -> None:
        chosen = {q: o for q, o in self.offsets.items() if queues is None or q in queues}
        if self._offset_file is not None:
            self._write_local_offsets()
            return
        try:
            await self._reader.commit(chosen)
        except SparkmqError as exc:
            logger.warning("persisting offsets of %s failed: %s", self.group, exc.remark)

    def _load_local_offsets(self) -> None:
        if self._offset_file is None or not self._offset_file.exists():
            return
        for entry in json.loads(self._offset_file.read_text(encoding="utf-8")):
            self.offsets[MessageQueue(entry["topic"], entry["brokerName"], entry["queueId"])] = entry["offset"]

    def _write_local_offsets(self) -> None:
        assert self._offset_file is not None
        self._offset_file.parent.mkdir(parents=True, exist_ok=True)
        entries = [dict(q.to_json(), offset=o) for q, o in self.offsets.items()]
        tmp = self._offset_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries), encoding="utf-8")
        os.replace(tmp, self._offset_file)

    @property
    def assigned(self) -> list[MessageQueue]:
        return sorted(self._queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))


class PushConsumer:
    """The blocking push consumer: ``AsyncPushConsumer`` on the process's client loop.

    >>> # consumer = PushConsumer("CID_orders", "127.0.0.1:9876")
    >>> # consumer.subscribe("orders", "*", lambda message: print(message.body))
    >>> # consumer.start(); ...; consumer.close()
    """

    def __init__(self, group: str, namesrv_addr: str, **options: Any) -> None:
        self._options = options
        self._args = (group, namesrv_addr)
        self._subscriptions: list[tuple[str, str, Listener]] = []
        self._async: AsyncPushConsumer | None = None

    def subscribe(self, topic: str, expression: str, listener: Listener) -> None:
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
