"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), and C++'s batch-as-send.

Checks topic and queue, auto-creates topics, splits batches (inflating C++ 1.2.3's
compressed batch bodies first), moves delayed messages to the schedule topic and
over-retried messages to the DLQ, stores, and with SYNC flush answers only after the fsync.
Transactional half messages are refused (NO_PERMISSION, as RocketMQ answers with
``rejectTransactionMessage``) until the broker can commit or roll them back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import zlib
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from sparkmq.broker.context import BrokerContext
from sparkmq.broker.delay import delay_level_of, redirect_if_delayed
from sparkmq.broker.put_codes import PUT_STATUS_TO_RESPONSE
from sparkmq.broker.topics import check_sendable
from sparkmq.broker.transactions.prepare import prepare_half
from sparkmq.broker.transactions.state import is_prepared
from sparkmq.errors import InvalidTopicError, MessageError
from sparkmq.message import layout as L
from sparkmq.message.batch import MAX_INFLATED_BATCH_BYTES, decode_batch_items
from sparkmq.message.msgid import ipv4_bytes, offset_msg_ids
from sparkmq.message.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from sparkmq.message.properties import DELAY_TIME_LEVEL, WAIT_STORE_MSG_OK, append_properties, find_property
from sparkmq.message.record import Host, MessageBatch
from sparkmq.protocol import PermName, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import SendMessageRequestHeader, parse_send_request_header, send_response_fields
from sparkmq.protocol.namesrv_bodies import TopicConfig
from sparkmq.remoting import RemotingConnection
from sparkmq.remoting.connection import Answer
from sparkmq.remoting.serving import error_response
from sparkmq.store import PutResult

_WAIT = WAIT_STORE_MSG_OK.encode()
_DELAY = DELAY_TIME_LEVEL.encode() + b"\x01"  # a cheap test before redirect_if_delayed parses the properties
_BORN_HOST = "send.born_host"  # connection attribute: the peer as a record's BORNHOST


@dataclass(slots=True)
class _Send:
    """A send request checked and turned into the batch to store."""

    request: RemotingCommand
    batch: MessageBatch
    queue_id: int
    wait: bool


class SendProcessor:
    """Serves the send codes for one broker.

    The single sends decoded from one read form a group (``serve_group``): each is checked on
    its own (a refusal answers only that request), the accepted ones are stored by one
    :meth:`BrokerContext.put_group`, and answered at once, or, with SYNC flush, after one
    shared flush wait (no Task or timer per request).
    """

    def __init__(self, context: BrokerContext) -> None:
        self.ctx = context
        self._max_delay_level = len(context.config.message_delay_level.split())

    async def __call__(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | None:
        answer = self.serve_group([request], connection)[0]
        if answer is None or isinstance(answer, RemotingCommand):
            return answer
        return await answer

    def serve_group(self, requests: list[RemotingCommand], connection: RemotingConnection) -> list[Answer]:
        """Answer each request of a run of sends (see the class)."""
        answers: list[Answer] = [None] * len(requests)
        sends: list[tuple[int, _Send]] = []
        topics_before = self.ctx.topics.version
        for i, request in enumerate(requests):
            try:
                prepared = self._prepare(request, connection)
            except Exception as exc:  # noqa: BLE001 - one request's failure is its own answer
                answers[i] = error_response(request, exc, connection.peer)
                continue
            if isinstance(prepared, RemotingCommand):
                answers[i] = prepared
            else:
                sends.append((i, prepared))
        if not sends:
            return answers
        results, durable = self.ctx.put_group([send.batch for _i, send in sends], [send.wait for _i, send in sends])
        stats = self.ctx.stats
        for (_i, send), result in zip(sends, results, strict=True):
            if result.ok:
                stats.put(send.batch.topic, len(result.physical_offsets), len(send.request.body))
        if self.ctx.topics.version != topics_before:  # a topic made for these messages is on disk before the acks
            durable = self._persist_topics_then(results if durable is None else durable)
        if durable is None:
            for (i, send), result in zip(sends, results, strict=True):
                answers[i] = self._response(send, result)
            return answers
        waiting = asyncio.ensure_future(durable)
        futures = [self._answer_when(waiting, k, send) for k, (_i, send) in enumerate(sends)]
        for (i, _send), future in zip(sends, futures, strict=True):
            answers[i] = future
        return answers

    async def _persist_topics_then(self, results: list[PutResult] | Awaitable[list[PutResult]]) -> list[PutResult]:
        if not isinstance(results, list):
            results = await results
        await self.ctx.persister.persist("topics.json")
        return results

    def _answer_when(
        self, waiting: asyncio.Future[list[PutResult]], index: int, send: _Send
    ) -> asyncio.Future[RemotingCommand]:
        """A future of the response to ``send``, settled when the group's wait ends."""
        future: asyncio.Future[RemotingCommand] = waiting.get_loop().create_future()

        def settle(done: asyncio.Future[list[PutResult]]) -> None:
            if future.done():
                return
            if done.cancelled():
                future.cancel()
            elif (exc := done.exception()) is not None:
                future.set_exception(exc)
            else:
                future.set_result(self._response(send, done.result()[index]))

        waiting.add_done_callback(settle)
        return future

    def _prepare(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | _Send:
        """The checked send, or the response that refuses it."""
        header = parse_send_request_header(request.code, request.ext_fields)
        try:
            check_sendable(header.topic)
        except InvalidTopicError as exc:  # SYSTEM_ERROR, or NO_PERMISSION for a TopicNotWritableError
            return request.make_response(exc.code, remark=exc.remark)
        topic_config = self._topic_for_send(header)
        if topic_config is None:
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{header.topic}] not exist, apply first please!"
            )
        if not topic_config.perm & PermName.PERM_WRITE:
            return request.make_response(
                ResponseCode.NO_PERMISSION, remark=f"the topic[{header.topic}] sending message is forbidden"
            )
        if header.queue_id < 0 and topic_config.write_queue_nums <= 0:
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=(
                    f"topic[{header.topic}] has no writable queue: writeQueueNums is {topic_config.write_queue_nums}"
                ),
            )
        queue_id = header.queue_id if header.queue_id >= 0 else random.randrange(topic_config.write_queue_nums)
        if queue_id >= max(topic_config.write_queue_nums, topic_config.read_queue_nums):
            return request.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=(
                    f"request queueId[{queue_id}] is illegal, topic: {header.topic} writeQueueNums: "
                    f"{topic_config.write_queue_nums} readQueueNums: {topic_config.read_queue_nums}"
                ),
            )
        try:
            batch = self._batch_of(request, header, queue_id, connection)
        except MessageError as exc:
            return request.make_response(ResponseCode.MESSAGE_ILLEGAL, remark=exc.remark)
        batch = self._route_retry_and_dlq(batch, header)
        if is_prepared(batch):  # transactions: the half message waits in RMQ_SYS_TRANS_HALF_TOPIC for its END
            batch = prepare_half(self.ctx, batch, header.producer_group, connection)
        elif not _is_batch(request, header) and _DELAY in batch.properties[0]:  # a batch is never scheduled
            batch = redirect_if_delayed(batch, self._max_delay_level)
        wait = find_property(batch.properties[0], _WAIT) != b"false"
        return _Send(request, batch, queue_id, wait)

    def _topic_for_send(self, header: SendMessageRequestHeader) -> TopicConfig | None:
        topics = self.ctx.topics
        if header.topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            return topics.create_system_topic(header.topic, 1)
        return topics.create_on_send(header.topic, header.default_topic_queue_nums)

    def _batch_of(
        self, request: RemotingCommand, header: SendMessageRequestHeader, queue_id: int, connection: RemotingConnection
    ) -> MessageBatch:
        host = connection.attributes.get(_BORN_HOST)
        if host is None:
            host = connection.attributes[_BORN_HOST] = Host(ipv4_bytes(connection.peer[0]), connection.peer[1])
        props = (header.properties or "").encode("utf-8")
        sys_flag = header.sys_flag

        def batch(
            bodies: Sequence[bytes], properties: Sequence[bytes], flags: Sequence[int] | None, flag_bits: int
        ) -> MessageBatch:
            return MessageBatch(
                header.topic,
                queue_id,
                bodies,
                properties,
                flags,
                sys_flag=flag_bits,
                born_timestamp=header.born_timestamp,
                born_host=host,
                reconsume_times=header.reconsume_times or 0,
            )

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
            item_props = [append_properties(p, props) for p in items.properties] if props else items.properties
            return batch(items.bodies, item_props, items.flags, sys_flag)
        return batch([request.body], [props], [header.flag], sys_flag)

    def _route_retry_and_dlq(self, batch: MessageBatch, header: SendMessageRequestHeader) -> MessageBatch:
        """``handleRetryAndDLQ``: a message sent to %RETRY%group past its retries goes to %DLQ%group."""
        if not batch.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return batch
        group = batch.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        config = self.ctx.groups.find_or_create(group)
        max_times = (
            header.max_reconsume_times
            if header.max_reconsume_times is not None
            else (config.retry_max_times if config else 16)
        )
        if batch.reconsume_times < max_times:
            return batch
        topic = dlq_topic(group)
        self.ctx.topics.create_system_topic(topic, 1)
        return dataclasses.replace(batch, topic=topic, queue_id=0)

    def _response(self, send: _Send, result: PutResult) -> RemotingCommand:
        request, code = send.request, PUT_STATUS_TO_RESPONSE[result.status]
        if result.store_host is None:
            return request.make_response(code, remark=result.remark or result.status.value)
        host = result.store_host
        msg_ids = offset_msg_ids(host.ip, host.port, result.physical_offsets)
        cfg = self.ctx.config
        return request.make_response(
            code,
            ext_fields=send_response_fields(msg_ids, send.queue_id, result.queue_offset, cfg.region_id, cfg.trace_on),
        )


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
