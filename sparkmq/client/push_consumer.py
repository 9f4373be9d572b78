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
        self._offset_file = (offset_dir or Path.home() / ".sparkmq_offsets") / f"{self.instance.client_id}-{group}.json" \
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
        self.instance.rebalance_hooks[self.group] = self.rebalance
        await self.instance.start()
        for topic in self._topics():
            try:
                await self.instance.route(topic)
            except SparkmqError as exc:
                logger.warning("no route for %s yet: %s", topic, exc.remark)
        self._load_local_offsets()
        await self.instance.heartbeat()
        await self.rebalance()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._every(REBALANCE_INTERVAL_S, self.rebalance)),
                       loop.create_task(self._every(PERSIST_INTERVAL_S, self.persist_offsets))]
        if self.orderly:
            self._tasks.append(loop.create_task(self._every(LOCK_INTERVAL_S, self._relock)))

    async def _every(self, interval_s: float, action: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await action()
            except SparkmqError as exc:
                logger.warning("consumer %s: %s failed: %s", self.group, action.__name__, exc.remark)

    async def close(self) -> None:
        """Stop pulling, finish what is being consumed, persist offsets, unlock, unregister."""
        self.instance.rebalance_hooks.pop(self.group, None)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        async with self._rebalance_lock:
            self._closing = True
            for queue in list(self._queues):
                await self._drop(queue, persist=False)
        if self._consume_tasks:
            await asyncio.wait(self._consume_tasks, timeout=10)
        await self.persist_offsets()
        self.instance.consumer_data.pop(self.group, None)
        await self.instance.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> AsyncPushConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- rebalance -------------------------------------------------------------------------
    async def rebalance(self) -> None:
        """Recompute this member's queues and start/stop their pull loops."""
        async with self._rebalance_lock:
            if self._closing:
                return
            wanted: set[MessageQueue] = set()
            for topic in self._topics():
                try:
                    queues = (await self.instance.route(topic, refresh=True)).subscribe_queues()
                except SparkmqError as exc:
                    logger.info("rebalance of %s skips %s: %s", self.group, topic, exc.remark)
                    continue
                if self.message_model is MessageModel.BROADCASTING:
                    wanted.update(queues)
                    continue
                ids = await self._member_ids(queues)
                wanted.update(self.allocate(self.instance.client_id, queues, ids))
            for queue in [q for q in self._queues if q not in wanted]:
                await self._drop(queue)
            for queue in sorted(wanted - set(self._queues), key=lambda q: (q.topic, q.broker_name, q.queue_id)):
                await self._take(queue)

    async def _member_ids(self, queues: list[MessageQueue]) -> list[str]:
        if not queues:
            return []
        fields = ConsumerGroupRequestHeader(self.group).to_fields()
        response = await self.instance.invoke_broker(queues[0].broker_name, RequestCode.GET_CONSUMER_LIST_BY_GROUP, fields)
        return list(ConsumerListBody.decode(check_response(response, "consumer list").body).consumer_id_list)

    async def _take(self, queue: MessageQueue) -> None:
        if self.orderly and not await self._lock([queue]):
            return  # another member still holds it; the next rebalance tries again
        offset = self.offsets.get(queue, -1)
        if offset < 0 and self.message_model is MessageModel.CLUSTERING:
            offset = await self._reader.committed(queue)
        if offset < 0:
            offset = 0 if queue.topic.startswith("%RETRY%") else await self._reader.max_offset(queue)
        self.offsets[queue] = offset
        process = self._queues[queue] = ProcessQueue()
        process.locked = self.orderly
        self._pull_tasks[queue] = asyncio.get_running_loop().create_task(self._pull_loop(queue, process, offset))

    async def _drop(self, queue: MessageQueue, persist: bool = True) -> None:
        process = self._queues.pop(queue)
        process.dropped = True
        task = self._pull_tasks.pop(queue)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if persist:
            await self.persist_offsets([queue])
        if self.orderly:
            await self._unlock([queue])

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

    def _call(self, message: ReceivedMessage) -> bool:
        try:
            return self._listener_of(message)(message) in (None, ConsumeResult.SUCCESS)
        except Exception:  # the user's listener failed: the message is retried, the failure logged
            logger.exception("listener of %s failed on message %s", self.group, message.msg_id)
            return False

    async def _consume_concurrently(self, queue: MessageQueue, process: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(*(loop.run_in_executor(self._executor, self._call, m) for m in messages))
        for message, ok in zip(messages, results):
            if not ok and self.message_model is MessageModel.CLUSTERING:
                while not await self._send_back(message) and not process.dropped:
                    await asyncio.sleep(RETRY_LATER_S)
        committable = process.remove(messages)
        if not process.dropped:
            self.offsets[queue] = max(self.offsets.get(queue, 0), committable)

    async def _consume_orderly(self, queue: MessageQueue, process: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        loop = asyncio.get_running_loop()
        async with self._queue_lock(queue):
            for message in messages:
                attempts = 0
                while not process.dropped and not await loop.run_in_executor(self._executor, self._call, message):
                    attempts += 1
                    if attempts > self.max_reconsume_times:
                        await self._send_back(message, delay_level=-1)  # to the DLQ
                        break
                    await asyncio.sleep(ORDERLY_SUSPEND_S)
                if process.dropped:
                    return
                committable = process.remove([message])
                self.offsets[queue] = max(self.offsets.get(queue, 0), committable)

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
        for queue in list(self._queues):
            if not await self._lock([queue]):
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
