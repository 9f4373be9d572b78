"""The consuming RPCs: ReceiveMessage (a POP), AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from sparkmq.broker.acl.accounts import Perm
from sparkmq.broker.grpc import convert, settings
from sparkmq.broker.grpc.calls import RpcBase, client_id_of, status, tags_of
from sparkmq.broker.pop import ReceiptHandle
from sparkmq.broker.pop.service import MAX_INVISIBLE_MS, MIN_INVISIBLE_MS
from sparkmq.errors import InvalidReceiptHandleError

logger = logging.getLogger(__name__)
MAX_LONG_POLLING_S = 30


class ConsumeRpcs(RpcBase):
    """POP consumption for the 5.x consumers."""

    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        denied = self._denied(context, request.message_queue.topic.name, Perm.SUB, request.group.name)
        if denied is not None:
            yield spb.ReceiveMessageResponse(status=denied)
            return
        refusal, group_config = self._refuse_receive(request)
        if refusal is not None:
            yield spb.ReceiveMessageResponse(status=refusal)
            return
        assert group_config is not None
        topic = request.message_queue.topic.name
        default_ms = self.renew.invisible_ms
        invisible_ms = (
            request.invisible_duration.ToMilliseconds() if request.HasField("invisible_duration") else default_ms
        )
        wait_ms = min(request.long_polling_timeout.ToMilliseconds(), MAX_LONG_POLLING_S * 1000)
        tags = tags_of(request.filter_expression)
        fifo = group_config.consume_message_orderly
        # the proxy pops every queue of the broker for a non-FIFO group (queueId -1), whichever the client named
        queue_id = request.message_queue.id if fifo and request.message_queue.id >= 0 else None
        group = request.group.name
        popped = await self.pop.pop_waiting(
            group, topic, request.batch_size, invisible_ms, wait_ms, fifo=fifo, tags=tags, queue_id=queue_id
        )
        if not popped:
            yield spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
            return
        client_id = client_id_of(context) if request.auto_renew else ""
        for p in popped:
            if client_id:
                self.renew.hold(group, topic, client_id, p.handle)
            key = (request.group.name, p.message.topic, p.message.queue_id)
            attempt = self.pop.fifo_attempt(key, p.message.queue_offset) if fifo else p.delivery_attempt
            message = convert.to_protobuf(p.message, topic, p.handle.encode(), invisible_ms, attempt, pb.CRC32)
            yield spb.ReceiveMessageResponse(message=message)
        yield spb.ReceiveMessageResponse(status=status())
        stamp = spb.ReceiveMessageResponse()
        stamp.delivery_timestamp.FromMilliseconds(int(time.time() * 1000))
        yield stamp

    def _refuse_receive(self, request: spb.ReceiveMessageRequest) -> tuple[pb.Status | None, Any]:
        topic = request.message_queue.topic.name
        if not request.group.name:
            return status(pb.ILLEGAL_CONSUMER_GROUP, "consumer group is empty"), None
        if self.ctx.topics.get(topic) is None:
            return status(pb.TOPIC_NOT_FOUND, f"topic {topic!r} not found"), None
        if request.batch_size <= 0 or request.batch_size > settings.RECEIVE_BATCH_SIZE:
            return status(
                pb.BAD_REQUEST, f"batch size {request.batch_size} outside 1..{settings.RECEIVE_BATCH_SIZE}"
            ), None
        if request.HasField("invisible_duration"):
            invisible = request.invisible_duration.ToMilliseconds()
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                return status(pb.ILLEGAL_INVISIBLE_TIME, f"invisible time {invisible} ms outside 1 s..12 h"), None
        if request.filter_expression.type == pb.SQL:
            return status(pb.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters over gRPC are not served yet"), None
        group = self.ctx.groups.find_or_create(request.group.name)
        if group is None:
            return status(pb.CONSUMER_GROUP_NOT_FOUND, self.ctx.groups.refusal(request.group.name)), None
        return None, group

    async def AckMessage(self, request: spb.AckMessageRequest, context: Any) -> spb.AckMessageResponse:
        denied = self._denied(context, group=request.group.name)
        if denied is not None:
            return spb.AckMessageResponse(status=denied)
        entries = []
        for entry in request.entries:
            try:
                self.pop.ack(request.group.name, request.topic.name, self.renew.current(entry.receipt_handle))
                self.renew.release(entry.receipt_handle)
                result = status()
            except InvalidReceiptHandleError as exc:
                result = status(pb.INVALID_RECEIPT_HANDLE, exc.remark)
            entries.append(
                spb.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
                )
            )
        await self.pop.durable()
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
            handle = self.pop.change_invisible(group, topic, self.renew.current(request.receipt_handle), invisible)
            self.renew.release(request.receipt_handle)
        except InvalidReceiptHandleError as exc:
            return spb.ChangeInvisibleDurationResponse(status=status(pb.INVALID_RECEIPT_HANDLE, exc.remark))
        await self.pop.durable()
        return spb.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle.encode())

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        denied = self._denied(context, group=request.group.name)
        if denied is not None:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=denied)
        group = request.group.name
        current = self.renew.current(request.receipt_handle)
        self.renew.release(request.receipt_handle)
        try:
            handle = ReceiptHandle.decode(current)
            message = self.pop.inflight_message(group, request.topic.name, handle)
        except InvalidReceiptHandleError as exc:
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INVALID_RECEIPT_HANDLE, exc.remark))
        if not await self.pop.resend(message, group, to_dlq=True):
            return spb.ForwardMessageToDeadLetterQueueResponse(
                status=status(pb.INTERNAL_SERVER_ERROR, "the DLQ copy could not be stored")
            )
        try:
            self.pop.ack(group, request.topic.name, current)
        except InvalidReceiptHandleError:
            logger.info("a message forwarded to the DLQ of %s expired meanwhile", group)
        await self.pop.durable()
        return spb.ForwardMessageToDeadLetterQueueResponse(status=status())
