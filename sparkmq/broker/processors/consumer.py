"""Client and consumer management: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP,
QUERY/UPDATE_CONSUMER_OFFSET, LOCK/UNLOCK_BATCH_MQ, CHECK_CLIENT_CONFIG."""

from __future__ import annotations

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.filtering import resolve
from sparkmq.broker.validation import check_group, check_topic
from sparkmq.message.names import retry_topic
from sparkmq.protocol import RemotingCommand, ResponseCode
from sparkmq.protocol.bodies import ConsumerListBody, LockBatchRequestBody, LockBatchResponseBody
from sparkmq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from sparkmq.protocol.heartbeat import CheckClientRequestBody, HeartbeatData, MessageModel
from sparkmq.remoting import RemotingConnection


class ConsumerProcessors:
    """The processors of this module, sharing one broker context."""

    def __init__(self, context: BrokerContext) -> None:
        self.ctx = context

    async def heartbeat(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        data = HeartbeatData.decode(request.body)
        ctx = self.ctx
        for consumer in data.consumer_data_set:  # checked up front: a bad heartbeat changes nothing
            check_group(consumer.group_name, "consumerDataSet.groupName")
            for subscription in consumer.subscription_data_set:
                check_topic(subscription.topic)
        for producer in data.producer_data_set:
            check_group(producer.group_name, "producerDataSet.groupName")
        changed, refused = [], []
        peer = (request.language.name, request.version)
        for consumer in data.consumer_data_set:
            config = ctx.groups.find_or_create(consumer.group_name)
            if config is None:
                refused.append(consumer.group_name)
                continue
            if consumer.message_model is MessageModel.CLUSTERING:
                ctx.topics.create_system_topic(retry_topic(consumer.group_name), config.retry_queue_nums)
            if ctx.clients.register_consumer(data.client_id, connection, consumer, *peer):
                changed.append(consumer.group_name)
        for producer in data.producer_data_set:
            ctx.clients.register_producer(data.client_id, connection, producer.group_name, *peer)
        ctx.notify_consumer_ids_changed(changed)
        if refused:
            return request.make_response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                remark="; ".join(ctx.groups.refusal(group) for group in refused),
            )
        return request.make_response()

    async def unregister_client(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_fields(request.ext_fields)
        changed = self.ctx.clients.unregister(
            header.client_id, connection, header.producer_group, header.consumer_group
        )
        self.ctx.notify_consumer_ids_changed(changed)
        return request.make_response()

    async def consumer_list(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        header = GetConsumerListByGroupRequestHeader.from_fields(request.ext_fields)
        check_group(header.consumer_group)
        ids = self.ctx.clients.consumer_ids(header.consumer_group)
        if not ids:  # C++ 1.2.3 throws on SUCCESS with an empty list
            return request.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"no consumer for this group, {header.consumer_group}"
            )
        return request.make_response(body=ConsumerListBody(tuple(ids)).encode())

    async def query_offset(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        header = QueryConsumerOffsetRequestHeader.from_fields(request.ext_fields)
        check_group(header.consumer_group)
        check_topic(header.topic)
        offset = self.ctx.offsets.query(header.consumer_group, header.topic, header.queue_id)
        if offset < 0:
            # A new group starts at 0 when the queue still begins at 0 (Java's ConsumerManageProcessor).
            if self.ctx.store.min_offset_in_queue(header.topic, header.queue_id) > 0:
                return request.make_response(
                    ResponseCode.QUERY_NOT_FOUND,
                    remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
                )
            offset = 0
        return request.make_response(ext_fields=OffsetResponseHeader(offset).to_fields())

    async def update_offset(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader.from_fields(request.ext_fields)
        check_group(header.consumer_group)
        check_topic(header.topic)
        if header.commit_offset >= 0:
            self.ctx.offsets.commit(header.consumer_group, header.topic, header.queue_id, header.commit_offset)
        return request.make_response()

    async def lock_batch(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        body = LockBatchRequestBody.decode(request.body)
        check_group(body.consumer_group)
        held = self.ctx.locks.try_lock(body.consumer_group, body.mq_set, body.client_id)
        return request.make_response(body=LockBatchResponseBody(tuple(held)).encode())

    async def unlock_batch(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        body = LockBatchRequestBody.decode(request.body)
        check_group(body.consumer_group)
        self.ctx.locks.unlock(body.consumer_group, body.mq_set, body.client_id)
        return request.make_response()

    async def check_client_config(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        """Can this broker serve the subscription? SYSTEM_ERROR when SQL92 is off, SUBSCRIPTION_PARSE_FAILED
        (with the position) for a bad expression, SUCCESS otherwise (``ClientManageProcessor.checkClientConfig``)."""
        body = CheckClientRequestBody.decode(request.body)
        if body.subscription_data is not None:
            sub = body.subscription_data
            resolve(sub.sub_string, sub.expression_type, self.ctx.config.enable_property_filter)
        return request.make_response()
