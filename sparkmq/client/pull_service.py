"""The push consumer's pulling side (RocketMQ's ``PullMessageService``): one loop per assigned queue
that pulls while flow control allows and hands each batch to the consume service; and where a queue
the group never consumed starts (``computePullFromWhere``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from sparkmq.client.instance import ClientInstance
from sparkmq.client.message import ReceivedMessage, decode_pull_body
from sparkmq.client.process_queue import ProcessQueue
from sparkmq.client.pull_consumer import AsyncPullConsumer
from sparkmq.client.responses import check_response
from sparkmq.client.selector import MessageSelector
from sparkmq.errors import SparkmqError
from sparkmq.message.names import is_retry_topic
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.heartbeat import ConsumeFromWhere
from sparkmq.protocol.offset_headers import OffsetResponseHeader, SearchOffsetRequestHeader

logger = logging.getLogger(__name__)
PULL_SUSPEND_S = 15.0
FLOW_CONTROL_PAUSE_S = 0.05  # PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL
PULL_RETRY_S = 1.0  # after a failed pull

Consume = Callable[[MessageQueue, ProcessQueue, list[ReceivedMessage]], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class FlowControl:
    """When a queue's pulling pauses: ``pullThresholdForQueue`` messages or
    ``pullThresholdSizeForQueue`` bytes cached, or (concurrent consumers only) cached offsets spanning
    more than ``consumeConcurrentlyMaxSpan``."""

    max_messages: int
    max_bytes: int
    max_span: int | None  # None: no span limit (orderly consumers)

    def holds_back(self, process: ProcessQueue) -> bool:
        return (
            len(process) >= self.max_messages
            or process.cached_bytes >= self.max_bytes
            or (self.max_span is not None and process.span > self.max_span)
        )


class PullService:
    """Pull loops over ``reader``; what is pulled goes to ``consume`` (started by ``spawn``) and the
    offset of a queue with nothing left to consume moves in ``offsets``."""

    def __init__(
        self,
        reader: AsyncPullConsumer,
        batch_size: int,
        flow: FlowControl,
        offsets: dict[MessageQueue, int],
        consume: Consume,
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.reader = reader
        self.batch_size = batch_size
        self.flow = flow
        self.offsets = offsets
        self._consume = consume
        self._spawn = spawn

    async def pull_loop(
        self, queue: MessageQueue, process: ProcessQueue, offset: int, selector: MessageSelector
    ) -> None:
        """Pull ``queue`` from ``offset`` until ``process`` is dropped."""
        tags = selector.tags()
        while not process.dropped:
            if self.flow.holds_back(process):
                await asyncio.sleep(FLOW_CONTROL_PAUSE_S)
                continue
            try:
                result = await self.reader.pull_raw(queue, offset, self.batch_size, PULL_SUSPEND_S, selector)
            except SparkmqError as exc:
                logger.warning("pull %s at %d failed: %s", queue, offset, exc.remark)
                await asyncio.sleep(PULL_RETRY_S)
                continue
            moved = result.status == ResponseCode.PULL_OFFSET_MOVED
            if moved:
                logger.warning("offset %d of %s moved to %d", offset, queue, result.next_begin_offset)
            offset = result.next_begin_offset
            if not result.found:
                if not len(process):
                    self.offsets[queue] = offset if moved else max(self.offsets.get(queue, 0), offset)
                continue
            messages = decode_pull_body(result.body, queue.broker_name)
            if tags is not None:  # the broker filters by tag hash code; a hash collision is caught here
                skipped = [m for m in messages if m.tags not in tags]
                messages = [m for m in messages if m.tags in tags]
                if not messages:
                    self.offsets[queue] = max(self.offsets.get(queue, 0), skipped[-1].queue_offset + 1)
                    continue
            process.add(messages)
            self._spawn(self._consume(queue, process, messages))


async def first_offset(
    instance: ClientInstance,
    reader: AsyncPullConsumer,
    queue: MessageQueue,
    from_where: ConsumeFromWhere,
    timestamp_ms: int,
) -> int:
    """Where a queue the group never consumed starts (``computePullFromWhere``): FIRST_OFFSET, and
    LAST_OFFSET on a retry topic, at 0; TIMESTAMP (not on a retry topic) at the first message stored at
    or after ``timestamp_ms``; otherwise at the end."""
    retry = is_retry_topic(queue.topic)
    if from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET or (
        retry and from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    ):
        return 0
    if from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP and not retry:
        fields = SearchOffsetRequestHeader(queue.topic, queue.queue_id, timestamp_ms).to_fields()
        response = await instance.invoke_queue_broker(queue, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields)
        return OffsetResponseHeader.from_fields(
            check_response(response, f"offset of {queue} by time").ext_fields
        ).offset
    return await reader.max_offset(queue)
