"""CONSUMER_SEND_MSG_BACK (36): a message the consumer failed goes to %RETRY%group (delayed) or %DLQ%group."""

from __future__ import annotations

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.delay import redirect_if_delayed
from sparkmq.broker.requeue import message_copy, store_copy
from sparkmq.message.msgid import offset_msg_id
from sparkmq.message.names import dlq_topic, retry_topic
from sparkmq.message.properties import DELAY_TIME_LEVEL, ORIGIN_MESSAGE_ID, RETRY_TOPIC
from sparkmq.protocol import RemotingCommand, ResponseCode
from sparkmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from sparkmq.remoting import RemotingConnection
from sparkmq.store import PutMessageStatus

FIRST_RETRY_DELAY_LEVEL = 3  # delayLevel = 3 + reconsumeTimes: 10 s, 30 s, 1 m, ...


class SendBackProcessor:
    """``asyncConsumerSendMsgBack``."""

    def __init__(self, context: BrokerContext) -> None:
        self.ctx = context

    async def __call__(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_fields(request.ext_fields)
        ctx = self.ctx
        group = ctx.groups.find_or_create(h.group)
        if group is None:
            return request.make_response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=ctx.groups.refusal(h.group))
        message = ctx.store.look_message_by_offset(h.offset)
        if message is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=f"look message by offset failed, {h.offset}")
        props = message.properties
        props.setdefault(RETRY_TOPIC, message.topic)
        props.setdefault(
            ORIGIN_MESSAGE_ID,
            h.origin_msg_id or offset_msg_id(message.store_host.ip, message.store_host.port, message.physical_offset),
        )
        reconsume_times = message.reconsume_times
        max_times = h.max_reconsume_times if h.max_reconsume_times is not None else group.retry_max_times
        if reconsume_times >= max_times or h.delay_level < 0:
            topic = dlq_topic(h.group)
            props.pop(DELAY_TIME_LEVEL, None)
        else:
            topic = retry_topic(h.group)
            props[DELAY_TIME_LEVEL] = str(
                h.delay_level if h.delay_level > 0 else FIRST_RETRY_DELAY_LEVEL + reconsume_times
            )
        batch = message_copy(message, topic, props, reconsume_times + 1)
        batch = redirect_if_delayed(batch, len(ctx.config.message_delay_level.split()))
        result = await store_copy(ctx, topic, batch)
        if result.status is not PutMessageStatus.PUT_OK:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=f"{result.status.value} {result.remark}")
        return request.make_response()
