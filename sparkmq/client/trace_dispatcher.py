"""The batching sender of trace records (RocketMQ's ``AsyncTraceDispatcher``).

Hooks :meth:`TraceDispatcher.append` trace contexts from the client loop; that never waits and never
raises: a full queue drops the context and counts it (``dropped``). A background task wakes every
``POLL_S``, and sends what waited ``WAIT_S`` or more as trace messages of at most ``MAX_BATCH_CHARS``
(Java's 128000 - 10 * 1000) through its own producer; a full batch goes at once. At most
``MAX_IN_FLIGHT`` trace sends are outstanding; failed ones are logged and counted (``failed``), the
traced sends never see them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Protocol

from sparkmq.client.message import Message, SendResult
from sparkmq.client.trace_data import TRACE_TOPIC, TraceContext, encode

logger = logging.getLogger(__name__)

QUEUE_SIZE = 1024  # traceContextQueue's capacity
POLL_S = 0.1  # pollingTimeMil
WAIT_S = 0.5  # waitTimeThresholdMil
MAX_MESSAGE_BYTES = 128_000  # the trace producer's maxMessageSize
MAX_BATCH_CHARS = MAX_MESSAGE_BYTES - 10_000
MAX_BATCH_RECORDS = 256  # a full batch sends at once: a fast producer fills the queue within a poll
MAX_KEYS_CHARS = 16_384  # the KEYS property of a trace message stays well under the 32767 B of properties
MAX_IN_FLIGHT = 64
CLOSE_WAIT_S = 5.0  # the trace producer's send timeout
GROUP_PREFIX = "_INNER_TRACE_PRODUCER"  # TraceConstants.GROUP_NAME_PREFIX
INSTANCE_NAME = "PID_CLIENT_INNER_TRACE_PRODUCER"  # TraceConstants.TRACE_INSTANCE_NAME


class TraceSender(Protocol):
    """What the dispatcher needs of its producer (an ``AsyncProducer``)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def send_async(self, message: Message, callback: Any = None) -> asyncio.Future[SendResult]: ...


class TraceDispatcher:
    """Queues trace contexts and sends them in batches to ``topic`` through ``producer``."""

    def __init__(self, producer: TraceSender, topic: str | None = None, queue_size: int = QUEUE_SIZE) -> None:
        self.producer = producer
        self.topic = topic or TRACE_TOPIC
        self.queue_size = queue_size
        self.dropped = 0  # contexts refused by a full queue
        self.failed = 0  # trace messages whose send failed
        self.sent = 0  # trace messages the broker acknowledged
        self._queue: deque[tuple[float, str, set[str]]] = deque()  # (queued at, records, keys), encoded
        self._queued_chars = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_soon = False
        self._in_flight: set[asyncio.Future[SendResult]] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.producer.start()
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run())

    async def close(self) -> None:
        """Send what is queued, wait up to ``CLOSE_WAIT_S`` for the trace sends, stop the producer."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        deadline = time.monotonic() + CLOSE_WAIT_S
        while (self._queue or self._in_flight) and time.monotonic() < deadline:
            self._send_due(flush=True)
            if self._in_flight:
                await asyncio.wait(set(self._in_flight), timeout=max(0.0, deadline - time.monotonic()))
        if self._queue:
            logger.warning("%d trace records to %s not sent at close", len(self._queue), self.topic)
        await self.producer.close()

    @property
    def pending(self) -> int:
        """Records queued plus trace messages in flight."""
        return len(self._queue) + len(self._in_flight)

    def traces(self, topic: str) -> bool:
        """Whether a send to ``topic`` is traced: never the trace topic itself."""
        return not topic.startswith(self.topic)

    def append(self, ctx: TraceContext) -> bool:
        """Queue ``ctx`` for sending; False (and counted in ``dropped``) when the queue is full."""
        queue = self._queue
        if len(queue) >= self.queue_size:
            self.dropped += 1
            return False
        data, keys = encode(ctx)
        queue.append((time.monotonic(), data, keys))
        self._queued_chars += len(data)
        if self._loop is not None and not self._drain_soon and self._batch_ready():
            self._drain_soon = True
            self._loop.call_soon(self._drain)
        return True

    def _batch_ready(self) -> bool:
        return self._queued_chars >= MAX_BATCH_CHARS or len(self._queue) >= MAX_BATCH_RECORDS

    def _drain(self) -> None:
        self._drain_soon = False
        self._send_due(flush=False)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            self._send_due(flush=False)

    def _send_due(self, *, flush: bool) -> None:
        """Send queued records as trace messages: all of them if the oldest waited ``WAIT_S`` (or ``flush``),
        else only full batches (``MAX_BATCH_CHARS`` of records, ``MAX_BATCH_RECORDS`` or ``MAX_KEYS_CHARS``)."""
        queue = self._queue
        while queue and len(self._in_flight) < MAX_IN_FLIGHT:
            if not (flush or self._batch_ready() or time.monotonic() - queue[0][0] >= WAIT_S):
                return
            data: list[str] = []
            keys: set[str] = set()
            size = keys_size = 0
            while queue and size < MAX_BATCH_CHARS and len(data) < MAX_BATCH_RECORDS and keys_size < MAX_KEYS_CHARS:
                _at, text, record_keys = queue.popleft()
                data.append(text)
                keys |= record_keys
                size += len(text)
                keys_size += sum(len(k) + 1 for k in record_keys)
            self._queued_chars -= size
            self._send("".join(data), keys)

    def _send(self, data: str, keys: set[str]) -> None:
        message = Message(self.topic, data.encode("utf-8"), keys=sorted(keys))
        future = self.producer.send_async(message)
        self._in_flight.add(future)
        future.add_done_callback(self._sent)

    def _sent(self, future: asyncio.Future[SendResult]) -> None:
        self._in_flight.discard(future)
        if future.cancelled():
            self.failed += 1
        elif future.exception() is not None:
            self.failed += 1
            logger.warning("trace message to %s not sent: %s", self.topic, future.exception())
        else:
            self.sent += 1
