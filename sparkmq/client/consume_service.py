"""Consume services of the push consumer: run the user's listener on a thread pool and decide, as
RocketMQ's ``ConsumeMessageConcurrentlyService`` / ``ConsumeMessageOrderlyService`` do, what a
result means for the message (consumed, sent back for a later retry, suspended, dead-lettered).

A listener gets one :class:`ReceivedMessage`, or a list of up to ``consume_message_batch_max_size``
messages when that option is above 1. Only :attr:`ConsumeResult.SUCCESS` consumes: ``None``,
``RECONSUME_LATER``, an exception, or a call running past ``consume_timeout_s`` all mean
"try again later", as in Java (a call that times out keeps running in its thread; its result is
ignored).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkmq.client import trace_hooks
from sparkmq.client.instance import ClientInstance
from sparkmq.client.message import ReceivedMessage
from sparkmq.client.process_queue import ProcessQueue
from sparkmq.client.responses import check_response
from sparkmq.client.trace_data import (
    CONSUME_EXCEPTION,
    CONSUME_FAILED,
    CONSUME_RETURN_NULL,
    CONSUME_SUCCESS,
    CONSUME_TIME_OUT,
)
from sparkmq.client.trace_dispatcher import TraceDispatcher
from sparkmq.errors import ConfigError, SparkmqError
from sparkmq.protocol import RequestCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.group_bodies import LockBatchRequestBody, LockBatchResponseBody
from sparkmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from sparkmq.remoting.waits import done_within

logger = logging.getLogger(__name__)
RETRY_LATER_S = 5.0
ORDERLY_SUSPEND_S = 1.0  # suspendCurrentQueueTimeMillis
CONCURRENT_MAX_RECONSUME_TIMES = 16  # maxReconsumeTimes -1 means 16 (concurrent) or unlimited (orderly)


class ConsumeResult(enum.Enum):
    """What a listener says of its message(s): consumed, or try again later."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


Listener = Callable[[Any], "ConsumeResult | None"]  # one ReceivedMessage, or a list of them in batch mode


class ConsumeOutcome(enum.Enum):
    """How one listener call ended, as the consume loops act on it."""

    CONSUMED = "consumed"
    RETRY = "retry"
    SKIPPED = "skipped"  # not run: the consumer is closing


class ListenerRunner:
    """Runs listener calls on a thread pool with a timeout; maps every ending to a ConsumeOutcome."""

    def __init__(
        self,
        group: str,
        threads: int,
        timeout_s: float,
        batch_max_size: int,
        listener_of: Callable[[ReceivedMessage], Listener],
        closing: Callable[[], bool],
        tracer: TraceDispatcher | None = None,
    ) -> None:
        if batch_max_size < 1:
            raise ConfigError(f"consume_message_batch_max_size must be at least 1, not {batch_max_size}")
        if timeout_s <= 0:
            raise ConfigError(f"consume_timeout_s must be positive, not {timeout_s}")
        self.group = group
        self.timeout_s = timeout_s
        self.batch_max_size = batch_max_size
        self._listener_of = listener_of
        self._closing = closing
        self.tracer = tracer
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=f"sparkmq-consume-{group}")

    def chunks(self, messages: Sequence[ReceivedMessage]) -> list[list[ReceivedMessage]]:
        """``messages`` cut into listener calls of at most ``batch_max_size``."""
        size = self.batch_max_size
        return [list(messages[i : i + size]) for i in range(0, len(messages), size)]

    async def run(self, chunk: list[ReceivedMessage]) -> ConsumeOutcome:
        """One listener call for ``chunk`` (one message unless batch mode)."""
        if self._closing():
            return ConsumeOutcome.SKIPPED
        tracer = self.tracer
        before = trace_hooks.consume_started(tracer, self.group, chunk) if tracer is not None else None
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._call, chunk)
        if await done_within(future, self.timeout_s):
            outcome, code = future.result()
        else:
            outcome, code = self._timed_out(chunk), CONSUME_TIME_OUT
        if tracer is not None and before is not None and outcome is not ConsumeOutcome.SKIPPED:
            trace_hooks.consume_ended(tracer, before, outcome is ConsumeOutcome.CONSUMED, code, len(chunk))
        return outcome

    def _timed_out(self, chunk: list[ReceivedMessage]) -> ConsumeOutcome:
        logger.warning(
            "listener of %s ran past consume_timeout_s=%s on %s; the message(s) will be retried",
            self.group,
            self.timeout_s,
            [m.msg_id for m in chunk],
        )
        return ConsumeOutcome.RETRY

    def _call(self, chunk: list[ReceivedMessage]) -> tuple[ConsumeOutcome, int]:
        """The call's outcome and its ``ConsumeReturnType`` ordinal (a SubAfter trace's context code)."""
        if self._closing():
            return ConsumeOutcome.SKIPPED, CONSUME_SUCCESS
        listener = self._listener_of(chunk[0])
        try:
            result = listener(chunk if self.batch_max_size > 1 else chunk[0])
        except Exception:  # the user's listener failed: retried later, the failure logged
            logger.exception("listener of %s failed on %s", self.group, [m.msg_id for m in chunk])
            return ConsumeOutcome.RETRY, CONSUME_EXCEPTION
        if result is ConsumeResult.SUCCESS:
            return ConsumeOutcome.CONSUMED, CONSUME_SUCCESS
        return ConsumeOutcome.RETRY, CONSUME_RETURN_NULL if result is None else CONSUME_FAILED

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


async def consume_concurrently(
    runner: ListenerRunner,
    messages: Sequence[ReceivedMessage],
    *,
    clustering: bool,
    send_back: Callable[[ReceivedMessage], Awaitable[bool]],
    dropped: Callable[[], bool],
) -> list[ReceivedMessage]:
    """Consume ``messages`` in parallel calls; return those done with (consumed or handed back).

    A failed call's messages go back to the broker (CLUSTERING: %RETRY% with a delay, the DLQ
    after ``max_reconsume_times``), retried every ``RETRY_LATER_S`` until the broker takes them;
    BROADCASTING drops them with a warning, as Java does. Messages skipped at close are not
    returned: the committed offset stays before them.
    """
    chunks = runner.chunks(messages)
    outcomes = await asyncio.gather(*(runner.run(chunk) for chunk in chunks))
    done: list[ReceivedMessage] = []
    for chunk, outcome in zip(chunks, outcomes, strict=True):
        if outcome is ConsumeOutcome.SKIPPED:
            continue
        if outcome is ConsumeOutcome.RETRY:
            if not clustering:
                logger.warning(
                    "BROADCASTING consumer of %s drops failed messages %s", runner.group, [m.msg_id for m in chunk]
                )
            else:
                for message in chunk:
                    while not await send_back(message) and not dropped():
                        await asyncio.sleep(RETRY_LATER_S)
        done += chunk
    return done


async def consume_in_order(
    runner: ListenerRunner,
    messages: Sequence[ReceivedMessage],
    *,
    max_reconsume_times: int | None,
    dead_letter: Callable[[ReceivedMessage], Awaitable[bool]],
    dropped: Callable[[], bool],
    consumed: Callable[[list[ReceivedMessage]], bool],
    suspend_s: float = ORDERLY_SUSPEND_S,
) -> None:
    """Consume ``messages`` strictly in order; a failing call is retried after ``suspend_s``
    (the queue is suspended, never skipped) until it succeeds, or, when ``max_reconsume_times`` is
    set, until it has failed that often, then it goes to the DLQ. ``consumed(chunk)`` records the
    progress and returns False once the queue may no longer be consumed here."""
    for chunk in runner.chunks(messages):
        failures = 0
        while True:
            if dropped():
                return
            outcome = await runner.run(chunk)
            if outcome is ConsumeOutcome.SKIPPED:
                return  # closing: this chunk and the rest stay unconsumed and uncommitted
            if outcome is ConsumeOutcome.CONSUMED:
                break
            failures += 1
            if max_reconsume_times is not None and failures > max_reconsume_times:
                for message in chunk:
                    while not await dead_letter(message) and not dropped():
                        await asyncio.sleep(suspend_s)
                break
            await asyncio.sleep(suspend_s)
        if not consumed(chunk):
            return


async def send_back(
    instance: ClientInstance, group: str, message: ReceivedMessage, *, delay_level: int, max_reconsume_times: int
) -> bool:
    """CONSUMER_SEND_MSG_BACK: hand a failed message back to the broker that stored it (delay level
    0: the broker picks the retry delay; -1: straight to the DLQ). False when the broker did not take it."""
    fields = ConsumerSendMsgBackRequestHeader(
        message.commit_log_offset, group, delay_level, message.msg_id, message.topic, False, max_reconsume_times
    ).to_fields()
    try:
        response = await instance.remoting.invoke(message.store_host, RequestCode.CONSUMER_SEND_MSG_BACK, fields)
        check_response(response, "send back")
        return True
    except SparkmqError as exc:
        logger.warning("send back of %s failed: %s", message.msg_id, exc.remark)
        return False


class ConcurrentConsumeService:
    """``ConsumeMessageConcurrentlyService``: messages go to the pool as they come; failures are sent
    back for a delayed retry (CLUSTERING) and the queue's offset moves past what is done."""

    def __init__(
        self,
        runner: ListenerRunner,
        instance: ClientInstance,
        *,
        clustering: bool,
        max_reconsume_times: int | None,
        offsets: dict[MessageQueue, int],
    ) -> None:
        self.runner = runner
        self.instance = instance
        self.clustering = clustering
        self.max_reconsume_times = (
            CONCURRENT_MAX_RECONSUME_TIMES if max_reconsume_times is None else max_reconsume_times
        )
        self.offsets = offsets  # the consumer's table: what is consumed here is committed from there

    async def consume(self, queue: MessageQueue, process: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        """Consume one pulled batch of ``queue``; record the offset below which everything is done."""
        done = await consume_concurrently(
            self.runner,
            messages,
            clustering=self.clustering,
            send_back=self._send_back,
            dropped=lambda: process.dropped,
        )
        committable = process.remove(done)
        if not process.dropped:
            self.offsets[queue] = max(self.offsets.get(queue, 0), committable)

    async def _send_back(self, message: ReceivedMessage) -> bool:
        return await send_back(
            self.instance, self.runner.group, message, delay_level=0, max_reconsume_times=self.max_reconsume_times
        )


class OrderlyConsumeService:
    """``ConsumeMessageOrderlyService``: each queue is locked on its broker and consumed strictly in
    order by one call at a time; a failing message suspends its queue, never is skipped."""

    def __init__(
        self,
        runner: ListenerRunner,
        instance: ClientInstance,
        *,
        max_reconsume_times: int | None,
        suspend_s: float,
        offsets: dict[MessageQueue, int],
    ) -> None:
        self.runner = runner
        self.instance = instance
        self.max_reconsume_times = max_reconsume_times
        self.suspend_s = suspend_s
        self.offsets = offsets
        self._consume_locks: dict[MessageQueue, asyncio.Lock] = {}

    async def consume(self, queue: MessageQueue, process: ProcessQueue, messages: list[ReceivedMessage]) -> None:
        """Consume one pulled batch of ``queue`` in order, under the queue's consume lock."""

        def consumed(chunk: list[ReceivedMessage]) -> bool:
            # Consumed while this member still holds the queue's lock: record it even if the
            # queue is being dropped (the drop persists it before unlocking).
            if not process.locked:
                return False
            self.offsets[queue] = max(self.offsets.get(queue, 0), process.remove(chunk))
            return not process.dropped

        async with self.consume_lock(queue):
            await consume_in_order(
                self.runner,
                messages,
                max_reconsume_times=self.max_reconsume_times,
                dead_letter=self._dead_letter,
                dropped=lambda: process.dropped,
                consumed=consumed,
                suspend_s=self.suspend_s,
            )

    def consume_lock(self, queue: MessageQueue) -> asyncio.Lock:
        """Held while a listener call on ``queue`` runs; a drop waits for it (``tryLock``)."""
        return self._consume_locks.setdefault(queue, asyncio.Lock())

    async def lock(self, queues: list[MessageQueue]) -> bool:
        """LOCK_BATCH_MQ: whether the broker now lets this client consume every one of ``queues``."""
        body = LockBatchRequestBody(self.runner.group, self.instance.client_id, tuple(queues)).encode()
        response = await self.instance.invoke_broker(queues[0].broker_name, RequestCode.LOCK_BATCH_MQ, {}, body)
        held = LockBatchResponseBody.decode(check_response(response, "lock queues").body).lock_ok_mq_set
        return set(queues) <= set(held)

    async def unlock(self, queues: list[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ; a failure is logged (the broker's lock expires on its own)."""
        body = LockBatchRequestBody(self.runner.group, self.instance.client_id, tuple(queues)).encode()
        try:
            await self.instance.invoke_broker(queues[0].broker_name, RequestCode.UNLOCK_BATCH_MQ, {}, body)
        except SparkmqError as exc:
            logger.warning("unlock of %s failed: %s", queues, exc.remark)

    async def _dead_letter(self, message: ReceivedMessage) -> bool:
        max_times = CONCURRENT_MAX_RECONSUME_TIMES if self.max_reconsume_times is None else self.max_reconsume_times
        return await send_back(self.instance, self.runner.group, message, delay_level=-1, max_reconsume_times=max_times)
