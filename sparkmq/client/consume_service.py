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

from sparkmq.client.message import ReceivedMessage
from sparkmq.errors import ConfigError

logger = logging.getLogger(__name__)
RETRY_LATER_S = 5.0
ORDERLY_SUSPEND_S = 1.0  # suspendCurrentQueueTimeMillis


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

    def __init__(self, group: str, threads: int, timeout_s: float, batch_max_size: int,
                 listener_of: Callable[[ReceivedMessage], Listener], closing: Callable[[], bool]) -> None:
        if batch_max_size < 1:
            raise ConfigError(f"consume_message_batch_max_size must be at least 1, not {batch_max_size}")
        if timeout_s <= 0:
            raise ConfigError(f"consume_timeout_s must be positive, not {timeout_s}")
        self.group = group
        self.timeout_s = timeout_s
        self.batch_max_size = batch_max_size
        self._listener_of = listener_of
        self._closing = closing
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=f"sparkmq-consume-{group}")

    def chunks(self, messages: Sequence[ReceivedMessage]) -> list[list[ReceivedMessage]]:
        """``messages`` cut into listener calls of at most ``batch_max_size``."""
        size = self.batch_max_size
        return [list(messages[i : i + size]) for i in range(0, len(messages), size)]

    async def run(self, chunk: list[ReceivedMessage]) -> ConsumeOutcome:
        """One listener call for ``chunk`` (one message unless batch mode)."""
        if self._closing():
            return ConsumeOutcome.SKIPPED
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._call, chunk)
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except TimeoutError:
            logger.warning("listener of %s ran past consume_timeout_s=%s on %s; the message(s) will be retried",
                           self.group, self.timeout_s, [m.msg_id for m in chunk])
            return ConsumeOutcome.RETRY

    def _call(self, chunk: list[ReceivedMessage]) -> ConsumeOutcome:
        if self._closing():
            return ConsumeOutcome.SKIPPED
        listener = self._listener_of(chunk[0])
        try:
            result = listener(chunk if self.batch_max_size > 1 else chunk[0])
        except Exception:  # the user's listener failed: retried later, the failure logged
            logger.exception("listener of %s failed on %s", self.group, [m.msg_id for m in chunk])
            return ConsumeOutcome.RETRY
        return ConsumeOutcome.CONSUMED if result is ConsumeResult.SUCCESS else ConsumeOutcome.RETRY

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


async def consume_concurrently(runner: ListenerRunner, messages: Sequence[ReceivedMessage], *, clustering: bool,
                               send_back: Callable[[ReceivedMessage], Awaitable[bool]],
                               dropped: Callable[[], bool]) -> list[ReceivedMessage]:
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
                logger.warning("BROADCASTING consumer of %s drops failed messages %s", runner.group, [m.msg_id for m in chunk])
            else:
                for message in chunk:
                    while not await send_back(message) and not dropped():
                        await asyncio.sleep(RETRY_LATER_S)
        done += chunk
    return done


async def consume_in_order(runner: ListenerRunner, messages: Sequence[ReceivedMessage], *, max_reconsume_times: int | None,
                           dead_letter: Callable[[ReceivedMessage], Awaitable[bool]], dropped: Callable[[], bool],
                           consumed: Callable[[list[ReceivedMessage]], bool], suspend_s: float = ORDERLY_SUSPEND_S) -> None:
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
