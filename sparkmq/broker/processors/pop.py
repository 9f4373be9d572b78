"""RocketMQ 5's POP requests over remoting: POP_MESSAGE (200050), ACK_MESSAGE (200051),
CHANGE_MESSAGE_INVISIBLETIME (200053), served by the POP core (``broker/pop``).

A popped message goes back as its stored record; the answer's ``startOffsetInfo`` and
``msgOffsetInfo`` (``ExtraInfoUtil``'s ``"topicType queueId offset[,offset...]"`` entries joined
by ``;``) let the client build each message's ``POP_CK``, the ``extraInfo`` of its ack; a FIFO
pop's ``orderCountInfo`` says how often each message was delivered before. A SQL92 ``expType`` filters with
``enablePropertyFilter`` (SYSTEM_ERROR without it, SUBSCRIPTION_PARSE_FAILED for a bad expression).
"""

from __future__ import annotations

from collections import defaultdict

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.pop import Popped, PopService
from sparkmq.broker.pop.handle import ReceiptHandle
from sparkmq.broker.pop.select import PopRequest, subscription_selector
from sparkmq.errors import InvalidReceiptHandleError
from sparkmq.protocol import RemotingCommand, ResponseCode
from sparkmq.protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from sparkmq.remoting import RemotingConnection

MAX_POLL_MS = 20_000  # a POP_MESSAGE parks at most this long (the client's timeout is longer)
INIT_MODE_MAX = 1  # ConsumeInitMode: MIN 0 (the first message), MAX 1 (the last)


def offset_infos(popped: list[Popped]) -> tuple[str, str]:
    """``startOffsetInfo`` and ``msgOffsetInfo`` of a pop: per (topic type, queue), the first and every offset."""
    offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
    for p in popped:
        offsets["1" if p.handle.retry else "0", p.handle.queue_id].append(p.handle.offset)
    start = ";".join(f"{kind} {queue} {found[0]}" for (kind, queue), found in offsets.items())
    every = ";".join(f"{kind} {queue} {','.join(map(str, found))}" for (kind, queue), found in offsets.items())
    return start, every


def order_counts(pop: PopService, group: str, popped: list[Popped]) -> str:
    """A FIFO pop's ``orderCountInfo`` (``ExtraInfoUtil``): each message's earlier deliveries
    (``"topicType qo<queueId>%<offset> count"``), then each queue's fewest (``"topicType queueId count"``)."""
    entries: list[str] = []
    fewest: dict[tuple[str, int], int] = {}
    for p in popped:
        kind, m = "1" if p.handle.retry else "0", p.message
        count = pop.fifo_attempt((group, m.topic, m.queue_id), m.queue_offset) - 1
        entries.append(f"{kind} qo{m.queue_id}%{m.queue_offset} {count}")
        fewest[kind, m.queue_id] = min(count, fewest.get((kind, m.queue_id), count))
    return ";".join(entries + [f"{kind} {queue} {count}" for (kind, queue), count in fewest.items()])


class PopProcessors:
    """The three POP request codes of one broker."""

    def __init__(self, ctx: BrokerContext, pop: PopService) -> None:
        self.ctx = ctx
        self.pop = pop

    async def pop_message(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = PopMessageRequestHeader.from_fields(request.ext_fields)
        if self.ctx.groups.find_or_create(h.consumer_group) is None:
            refusal = self.ctx.groups.refusal(h.consumer_group)
            return request.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=refusal)
        if self.ctx.topics.get(h.topic) is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{h.topic}] not exist")
        selector = subscription_selector(h.exp_type, h.exp, self.ctx.config.enable_property_filter)
        ask = PopRequest(
            h.consumer_group,
            h.topic,
            h.max_msg_nums,
            h.invisible_time,
            fifo=bool(h.order),
            selector=selector,
            queue_id=h.queue_id if h.queue_id >= 0 else None,
            init_max=h.init_mode == INIT_MODE_MAX,
            attempt_id=h.attempt_id or "",
        )
        popped = await self.pop.pop_waiting(ask, min(max(0, h.poll_time), MAX_POLL_MS))
        if not popped:
            return request.make_response(ResponseCode.PULL_NOT_FOUND, remark="no new message")
        start, every = offset_infos(popped)
        counts = order_counts(self.pop, h.consumer_group, popped) if h.order else None
        first = popped[0].handle
        header = PopMessageResponseHeader(first.pop_time_ms, first.invisible_ms, 0, 0, start, every, counts)
        body = b"".join(p.record for p in popped)
        return request.make_response(ext_fields=header.to_fields(), body=body)

    async def ack_message(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = AckMessageRequestHeader.from_fields(request.ext_fields)
        try:
            self.pop.ack(h.consumer_group, h.topic, _extra_info(h.extra_info, h.offset))
        except InvalidReceiptHandleError as exc:
            return request.make_response(ResponseCode.NO_MESSAGE, remark=exc.remark)
        await self.pop.durable()
        return request.make_response()

    async def change_invisible_time(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = ChangeInvisibleTimeRequestHeader.from_fields(request.ext_fields)
        try:
            handle = self.pop.change_invisible(
                h.consumer_group, h.topic, _extra_info(h.extra_info, h.offset), h.invisible_time
            )
        except InvalidReceiptHandleError as exc:
            return request.make_response(ResponseCode.NO_MESSAGE, remark=exc.remark)
        await self.pop.durable()
        header = ChangeInvisibleTimeResponseHeader(handle.pop_time_ms, handle.invisible_ms, 0)
        return request.make_response(ext_fields=header.to_fields())


def _extra_info(extra_info: str, offset: int) -> str:
    """The receipt handle of an ack: ``extraInfo`` as the client built it, its offset from the header."""
    parts = extra_info.split(" ")
    if len(parts) == 7:  # Java clients may send the 7-field extraInfo without the message's offset
        parts.append(str(offset))
    handle = ReceiptHandle.decode(" ".join(parts))
    if handle.offset != offset:
        raise InvalidReceiptHandleError(f"extraInfo {extra_info!r} names offset {handle.offset}, not {offset}")
    return handle.encode()
