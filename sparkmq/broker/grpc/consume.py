"""The consuming RPCs: ReceiveMessage (a POP), AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Coroutine
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from sparkmq.broker.acl.accounts import Perm
from sparkmq.broker.grpc import convert, settings, streams
from sparkmq.broker.grpc.backend import PopAsk
from sparkmq.broker.grpc.calls import RpcBase, client_id_of, status, tags_of
from sparkmq.broker.pop.service import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS, Popped
from sparkmq.errors import (
    InvalidReceiptHandleError,
    OffsetStoreError,
    PropertyFilterDisabledError,
    RemoteError,
    SparkmqError,
    SubscriptionParseError,
)

logger = logging.getLogger(__name__)
MAX_LONG_POLLING_S = 30
CONSUME_ERRORS = (
    InvalidReceiptHandleError,
    RemoteError,
    OffsetStoreError,
    SubscriptionParseError,
    PropertyFilterDisabledError,
)
NACK_INVISIBLE_MS = 1000


async def answer(context: Any, response: spb.ReceiveMessageResponse) -> None:
    """Write one response of a receive; a client that does not take it loses the stream."""
    if not await streams.deliver(context, response):
        await streams.end_stalled(context)


def refusal(exc: SparkmqError) -> pb.Status:
    """The status of a receive, ack, change or forward that failed, as Apache's proxy maps a broker's answer:
    a handle that is not live; a filter that does not parse or is not enabled; a broker that did not answer
    (PROXY_TIMEOUT); anything else a broker or the POP journal refused is INTERNAL_SERVER_ERROR with the
    reason (nothing was changed: retry)."""
    if isinstance(exc, InvalidReceiptHandleError):
        return status(pb.INVALID_RECEIPT_HANDLE, exc.remark)
    if isinstance(exc, (SubscriptionParseError, PropertyFilterDisabledError)):
        return status(pb.ILLEGAL_FILTER_EXPRESSION, exc.remark)
    if isinstance(exc, RemoteError) and exc.retriable:
        return status(pb.PROXY_TIMEOUT, exc.remark)
    return status(pb.INTERNAL_SERVER_ERROR, exc.remark)


class ConsumeRpcs(RpcBase):
    """POP consumption for the 5.x consumers."""

    async def ReceiveMessage(self, request: spb.ReceiveMessageRequest, context: Any) -> None:
        denied = self._denied(context, request.message_queue.topic.name, Perm.SUB, request.group.name)
        if denied is not None:
            await answer(context, spb.ReceiveMessageResponse(status=denied))
            return
        refused, group_config = await self._refuse_receive(request)
        if refused is not None:
            await answer(context, spb.ReceiveMessageResponse(status=refused))
            return
        assert group_config is not None
        topic = request.message_queue.topic.name
        default_ms = self.renew.invisible_ms
        invisible_ms = (
            request.invisible_duration.ToMilliseconds() if request.HasField("invisible_duration") else default_ms
        )
        wait_ms = min(request.long_polling_timeout.ToMilliseconds(), MAX_LONG_POLLING_S * 1000)
        sql = request.filter_expression.expression if request.filter_expression.type == pb.SQL else ""
        tags = None if sql else tags_of(request.filter_expression)
        fifo = group_config.consume_message_orderly
        # the proxy pops every queue of the broker for a non-FIFO group (queueId -1), whichever the client named
        queue_id = request.message_queue.id if fifo and request.message_queue.id >= 0 else None
        group = request.group.name
        broker = request.message_queue.broker.name
        try:
            ask = PopAsk(broker, group, topic, request.batch_size, invisible_ms, wait_ms, fifo, tags, queue_id, sql)
            ask = dataclasses.replace(ask, attempt_id=request.attempt_id) if request.attempt_id else ask
            popped = await self._long_poll(client_id_of(context), self.backend.pop(ask))
        except CONSUME_ERRORS as exc:
            await answer(context, spb.ReceiveMessageResponse(status=refusal(exc)))
            return
        if not popped:
            await answer(context, spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message")))
            return
        client_id = client_id_of(context) if request.auto_renew else ""
        for i, p in enumerate(popped):
            if client_id:
                self.renew.hold(group, topic, client_id, p.handle)
            attempt = self.backend.delivery_attempt(group, p, fifo)
            message = convert.to_protobuf(p.message, topic, p.handle.encode(), invisible_ms, attempt, pb.CRC32)
            if not await streams.deliver(context, spb.ReceiveMessageResponse(message=message)):
                await self._nack(group, topic, popped[i:])
                await streams.end_stalled(context)
        await answer(context, spb.ReceiveMessageResponse(status=status()))
        stamp = spb.ReceiveMessageResponse()
        stamp.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        await answer(context, stamp)

    async def _nack(self, group: str, topic: str, unsent: list[Popped]) -> None:
        """Messages a stalled client never took: visible again in a second (as Apache's proxy nacks them)."""
        for p in unsent:
            handle = p.handle.encode()
            self.renew.release(handle)
            with contextlib.suppress(*CONSUME_ERRORS):
                await self.backend.change_invisible(group, topic, handle, NACK_INVISIBLE_MS)
        with contextlib.suppress(OffsetStoreError):
            await self.backend.durable()

    async def _long_poll(self, client_id: str, waiting: Coroutine[Any, Any, list[Popped]]) -> list[Popped]:
        """``waiting``'s messages, or none once the client says it terminates (its channel's shutdown would
        otherwise wait for the long poll to end)."""
        polling = asyncio.ensure_future(waiting)
        parked = self._long_polls.setdefault(client_id, set())
        parked.add(polling)
        try:
            return await polling
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not polling.cancelled() or (current is not None and current.cancelling()):
                raise
            return []
        finally:
            parked.discard(polling)
            if not parked:
                self._long_polls.pop(client_id, None)

    def end_long_polls(self, client_id: str) -> None:
        """Answer the client's parked receives now (NotifyClientTermination)."""
        for polling in self._long_polls.get(client_id, ()) if client_id else ():
            polling.cancel()

    async def _refuse_receive(self, request: spb.ReceiveMessageRequest) -> tuple[pb.Status | None, Any]:
        topic = request.message_queue.topic.name
        if not request.group.name:
            return status(pb.ILLEGAL_CONSUMER_GROUP, "consumer group is empty"), None
        if await self.backend.topic(topic) is None:
            return status(pb.TOPIC_NOT_FOUND, f"topic {topic!r} not found"), None
        if request.batch_size <= 0 or request.batch_size > settings.RECEIVE_BATCH_SIZE:
            return status(
                pb.BAD_REQUEST, f"batch size {request.batch_size} outside 1..{settings.RECEIVE_BATCH_SIZE}"
            ), None
        if request.HasField("invisible_duration"):
            invisible = request.invisible_duration.ToMilliseconds()
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                return status(pb.ILLEGAL_INVISIBLE_TIME, f"invisible time {invisible} ms outside 1 s..12 h"), None
        group = await self.backend.group(request.group.name)
        if group is None:
            return status(pb.CONSUMER_GROUP_NOT_FOUND, self.backend.group_refusal(request.group.name)), None
        return None, group

    async def AckMessage(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:
        denied = self._denied(context, group=request.group.name)
        if denied is not None:
            return spb.AckMessageResponse(status=denied)
        entries = []
        for entry in request.entries:
            try:
                await self.backend.ack(request.group.name, request.topic.name, self.renew.current(entry.receipt_handle))
                result = status()
            except CONSUME_ERRORS as exc:
                result = refusal(exc)
            entries.append(
                spb.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
                )
            )
        try:
            await self.backend.durable()
            lost = None
        except OffsetStoreError as exc:  # the journal lost them: nothing was acked
            lost = refusal(exc)
        for entry in entries:
            if entry.status.code == pb.OK:
                if lost is None:
                    self.renew.release(entry.receipt_handle)
                else:
                    entry.status.CopyFrom(lost)
        codes = {e.status.code for e in entries}
        if not entries:
            overall = status(pb.BAD_REQUEST, "no entry to acknowledge")
        else:
            overall = entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS, "some acks failed")
        return spb.AckMessageResponse(status=overall, entries=entries)

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Any
    ) -> spb.ChangeInvisibleDurationResponse:
        denied = self._denied(context, group=request.group.name)
        if denied is not None:
            return spb.ChangeInvisibleDurationResponse(status=denied)
        invisible = request.invisible_duration.ToMilliseconds()
        if not 0 <= invisible <= MAX_INVISIBLE_MS:
            return spb.ChangeInvisibleDurationResponse(
                status=status(pb.ILLEGAL_INVISIBLE_TIME, f"invisible time {invisible} ms outside 0..12 h")
            )
        try:
            group, topic = request.group.name, request.topic.name
            current = self.renew.current(request.receipt_handle)
            handle = await self.backend.change_invisible(group, topic, current, invisible)
            await self.backend.durable()
        except CONSUME_ERRORS as exc:
            return spb.ChangeInvisibleDurationResponse(status=refusal(exc))
        self.renew.release(request.receipt_handle)
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle.encode())

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        denied = self._denied(context, group=request.group.name)
        if denied is not None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=denied)
        group = request.group.name
        current = self.renew.current(request.receipt_handle)
        try:
            stored = await self.backend.dead_letter(group, request.topic.name, current)
            await self.backend.durable()
        except CONSUME_ERRORS as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=refusal(exc))
        if not stored:
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(pb.INTERNAL_SERVER_ERROR, "the DLQ copy could not be stored")
            )
        self.renew.release(request.receipt_handle)
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status())
