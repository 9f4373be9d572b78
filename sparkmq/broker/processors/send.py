"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), and C++'s batch-as-send.

Checks topic and queue, auto-creates topics, splits batches (inflating C++ 1.2.3's
compressed batch bodies first), moves delayed messages to the schedule topic and
over-retried messages to the DLQ, stores, and with SYNC flush answers only after the fsync.
Transactional half messages are refused (NO_PERMISSION, as RocketMQ answers with
``rejectTransactionMessage``) until the broker can commit or roll them back.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from collections.abc import Sequence

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.delay import delay_level_of, redirect_if_delayed
from sparkmq.broker.topics import check_sendable
from sparkmq.broker.transactions.prepare import prepare_half
from sparkmq.broker.transactions.state import is_prepared
from sparkmq.errors import InvalidTopicError, MessageError
from sparkmq.message import layout as L
from sparkmq.message.batch import decode_batch_items
from sparkmq.message.msgid import ipv4_bytes, offset_msg_id
from sparkmq.message.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from sparkmq.message.properties import WAIT_STORE_MSG_OK, append_properties, find_property
from sparkmq.message.record import Host, MessageBatch
from sparkmq.protocol import PermName, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import SendMessageRequestHeader, SendMessageResponseHeader, parse_send_request_header
from sparkmq.protocol.namesrv_bodies import TopicConfig
from sparkmq.remoting import RemotingConnection
from sparkmq.store import PutMessageStatus, PutResult

MAX_INFLATED_BATCH_BYTES = 64 * 1024 * 1024  # a compressed batch may not inflate past this

PUT_STATUS_TO_RESPONSE = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_BUSY,
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutMessageStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}


class SendProcessor:
    """Serves the send codes for one broker."""

    def __init__(self, context: BrokerContext) -> None:
        self.ctx = context
        self._max_delay_level = len(context.config.message_delay_level.split())

    async def __call__(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        header = parse_send_request_header(request.code, request.ext_fields)
        try:
            check_sendable(header.topic)
        except InvalidTopicError as exc:  # SYSTEM_ERROR, or NO_PERMISSION for a TopicNotWritableError
            return request.make_response(exc.code, remark=exc.remark)
        topics_before = self.ctx.topics.version
        topic_config = self._topic_for_send(header)
        if topic_config is None:
            return request.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                         remark=f"topic[{header.topic}] not exist, apply first please!")
        if not topic_config.perm & PermName.PERM_WRITE:
            return request.make_response(ResponseCode.NO_PERMISSION,
                                         remark=f"the topic[{header.topic}] sending message is forbidden")
        if header.queue_id < 0 and topic_config.write_queue_nums <= 0:
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=(
                f"topic[{header.topic}] has no writable queue: writeQueueNums is {topic_config.write_queue_nums}"))
        queue_id = header.queue_id if header.queue_id >= 0 else random.randrange(topic_config.write_queue_nums)
        if queue_id >= max(topic_config.write_queue_nums, topic_config.read_queue_nums):
            return request.make_response(ResponseCode.SYSTEM_ERROR, remark=(
                f"request queueId[{queue_id}] is illegal, topic: {header.topic} writeQueueNums: "
                f"{topic_config.write_queue_nums} readQueueNums: {topic_config.read_queue_nums}"))
        try:
            batch = self._batch_of(request, header, queue_id, connection)
        except MessageError as exc:
            return request.make_response(ResponseCode.MESSAGE_ILLEGAL, remark=exc.remark)
        batch = self._route_retry_and_dlq(batch, header)
        if is_prepared(batch):  # transactions: the half message waits in RMQ_SYS_TRANS_HALF_TOPIC for its END
            batch = prepare_half(self.ctx, batch, header.producer_group, connection)
        elif not _is_batch(request, header):  # a batch never goes through the schedule topic
            batch = redirect_if_delayed(batch, self._max_delay_level)
        wait = find_property(batch.properties[0], WAIT_STORE_MSG_OK.encode()) != b"false"
        result = await self.ctx.put(batch, wait_flush=wait)
        self.ctx.stats.put(batch.topic, len(result.physical_offsets), len(request.body))
        if self.ctx.topics.version != topics_before:  # a topic made for this message is on disk before the ack
            await self.ctx.persister.persist("topics.json")
        return self._response(request, result, queue_id, PUT_STATUS_TO_RESPONSE[result.status])

    def _topic_for_send(self, header: SendMessageRequestHeader) -> TopicConfig | None:
        topics = self.ctx.topics
        if header.topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            return topics.create_system_topic(header.topic, 1)
        return topics.create_on_send(header.topic, header.default_topic_queue_nums)

    def _batch_of(self, request: RemotingCommand, header: SendMessageRequestHeader, queue_id: int,
                  connection: RemotingConnection) -> MessageBatch:
        host = Host(ipv4_bytes(connection.peer[0]), connection.peer[1])
        props = (header.properties or "").encode("utf-8")
        sys_flag = header.sys_flag

        def batch(bodies: Sequence[bytes], properties: Sequence[bytes], flags: Sequence[int] | None,
                  flag_bits: int) -> MessageBatch:
            return MessageBatch(header.topic, queue_id, bodies, properties, flags, sys_flag=flag_bits,
                                born_timestamp=header.born_timestamp, born_host=host,
                                reconsume_times=header.reconsume_times or 0)

        if _is_batch(request, header):
            if delay_level_of(props) > 0 or L.transaction_type(sys_flag) != L.TRANSACTION_NOT_TYPE:
                # CommitLog.asyncPutMessages refuses both with MESSAGE_ILLEGAL
                raise MessageError("a batch may carry neither a delay level nor a transaction type")
            body = request.body
            if sys_flag & L.COMPRESSED_FLAG:
                body = _inflate(body)
                sys_flag &= ~L.COMPRESSED_FLAG
            items = decode_batch_items(body)
            if not len(items):
                raise MessageError("the batch holds no message")
            item_props = [append_properties(p, props) for p in items.properties]
            return batch(items.bodies, item_props, items.flags, sys_flag)
        return batch([request.body], [props], [header.flag], sys_flag)

    def _route_retry_and_dlq(self, batch: MessageBatch, header: SendMessageRequestHeader) -> MessageBatch:
        """``handleRetryAndDLQ``: a message sent to %RETRY%group past its retries goes to %DLQ%group."""
        if not batch.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return batch
        group = batch.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        config = self.ctx.groups.find_or_create(group)
        max_times = header.max_reconsume_times if header.max_reconsume_times is not None else (
            config.retry_max_times if config else 16)
        if batch.reconsume_times < max_times:
            return batch
        topic = dlq_topic(group)
        self.ctx.topics.create_system_topic(topic, 1)
        return dataclasses.replace(batch, topic=topic, queue_id=0)

    def _response(self, request: RemotingCommand, result: PutResult, queue_id: int, code: int) -> RemotingCommand:
        if result.store_host is None:
            return request.make_response(code, remark=result.remark or result.status.value)
        host = result.store_host
        assert host is not None
        msg_ids = ",".join(offset_msg_id(host.ip, host.port, int(p)) for p in result.physical_offsets)
        cfg = self.ctx.config
        fields = SendMessageResponseHeader(msg_ids, queue_id, result.queue_offset, msg_region=cfg.region_id,
                                           trace_on=cfg.trace_on).to_fields()
        return request.make_response(code, ext_fields=fields)


def _is_batch(request: RemotingCommand, header: SendMessageRequestHeader) -> bool:
    return request.code == RequestCode.SEND_BATCH_MESSAGE or header.batch


def _inflate(body: bytes) -> bytes:
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, MAX_INFLATED_BATCH_BYTES)
    except zlib.error as exc:
        raise MessageError(f"compressed batch body does not inflate: {exc}") from exc
    if inflater.unconsumed_tail:
        raise MessageError(f"compressed batch body inflates past {MAX_INFLATED_BATCH_BYTES} bytes")
    return data
