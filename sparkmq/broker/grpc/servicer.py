"""``apache.rocketmq.v2.MessagingService`` over the broker's store and POP core (grpc.aio).

Every RPC answers a ``Status`` with a code and a reason; a refused request never ends a stream
with an exception, so one bad client cannot disturb the others.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import AsyncIterator
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

import grpc
from sparkmq.broker.acl.accounts import Perm
from sparkmq.broker.acl.validator import AclValidator
from sparkmq.broker.context import BrokerContext
from sparkmq.broker.delay import redirect_if_delayed
from sparkmq.broker.grpc import convert, settings
from sparkmq.broker.grpc.calls import EndTransaction, Peer, born_host, client_id_of, status
from sparkmq.broker.grpc.consume import ConsumeRpcs
from sparkmq.broker.grpc.telemetry import TelemetryChannel, parse_transaction_id, transaction_id, tx_group
from sparkmq.broker.pop import PopService
from sparkmq.broker.topics import check_sendable
from sparkmq.broker.transactions.state import half_message
from sparkmq.errors import MessageError
from sparkmq.message.names import TRANS_HALF_TOPIC, is_system_topic
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import EndTransactionRequestHeader
from sparkmq.store import PutMessageStatus
from sparkmq.tables.attributes import MESSAGE_TYPE

logger = logging.getLogger(__name__)
MAX_SEND_BATCH = 1024  # messages in one SendMessage
MAX_LONG_POLLING_S = 30
COMMIT, ROLLBACK = 8, 12  # END_TRANSACTION's commitOrRollback
PERSISTENCE_TIMEOUTS = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
}


class MessagingServicer(ConsumeRpcs, service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    """The RPCs of the 5.x clients for one broker (proxyMode=LOCAL)."""

    # -- route -----------------------------------------------------------------------------
    def _accepted_types(self, topic: str) -> list[int]:
        config = self.ctx.topics.get(topic)
        declared = config.attribute_map.get(MESSAGE_TYPE, "") if config is not None else ""
        kind = convert.TYPE_NAMES.get(declared.upper())
        return [kind] if kind is not None else list(convert.ALL_TYPES)

    def _queues(self, topic: str, endpoints: pb.Endpoints, queue_ids: list[int]) -> list[pb.MessageQueue]:
        broker = pb.Broker(name=self.ctx.config.broker_name, id=0, endpoints=endpoints)
        types = self._accepted_types(topic)
        return [
            pb.MessageQueue(
                topic=pb.Resource(name=topic), id=q, permission=pb.READ_WRITE, broker=broker, accept_message_types=types
            )
            for q in queue_ids
        ]

    def _topic(self, name: str, *, create: bool = False) -> Any:
        config = self.ctx.topics.get(name)
        if config is None and create and not is_system_topic(name):
            config = self.ctx.topics.create_on_send(name, self.ctx.config.default_topic_queue_nums)
        return config

    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:
        denied = self._denied(context)
        if denied is not None:
            return spb.QueryRouteResponse(status=denied)
        config = self._topic(request.topic.name, create=True)
        if config is None:
            return spb.QueryRouteResponse(status=status(pb.TOPIC_NOT_FOUND, f"topic {request.topic.name!r} not found"))
        queues = self._queues(config.topic_name, request.endpoints, list(range(config.read_queue_nums)))
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context: Any) -> spb.QueryAssignmentResponse:
        denied = self._denied(context, request.topic.name, Perm.SUB, request.group.name)
        if denied is not None:
            return spb.QueryAssignmentResponse(status=denied)
        config = self._topic(request.topic.name)
        if config is None:
            return spb.QueryAssignmentResponse(
                status=status(pb.TOPIC_NOT_FOUND, f"topic {request.topic.name!r} not found")
            )
        group = self.ctx.groups.find_or_create(request.group.name)
        if group is None:
            return spb.QueryAssignmentResponse(
                status=status(pb.CONSUMER_GROUP_NOT_FOUND, self.ctx.groups.refusal(request.group.name))
            )
        # a FIFO group is given each queue; others one assignment for every queue of the broker (id -1)
        ids = list(range(config.read_queue_nums)) if group.consume_message_orderly else [-1]
        queues = self._queues(config.topic_name, request.endpoints, ids)
        return spb.QueryAssignmentResponse(
            status=status(), assignments=[pb.Assignment(message_queue=q) for q in queues]
        )

    # -- client lifecycle ------------------------------------------------------------------
    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        denied = self._denied(context)
        if denied is not None:
            return spb.HeartbeatResponse(status=denied)
        if request.group.name and self.ctx.groups.find_or_create(request.group.name) is None:
            return spb.HeartbeatResponse(
                status=status(pb.CONSUMER_GROUP_NOT_FOUND, self.ctx.groups.refusal(request.group.name))
            )
        known = self._producers.get(client_id_of(context))
        if known is not None:
            channel, groups = known
            for group in groups:  # keeps the producer a check-back target (clientChannelExpiredMs)
                self.ctx.clients.register_producer(channel.client_id, channel, group, "PYTHON")  # type: ignore[arg-type]
        return spb.HeartbeatResponse(status=status())

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        self.renew.release_client(client_id_of(context))
        self.end_long_polls(client_id_of(context))
        return spb.NotifyClientTerminationResponse(status=status())

    async def Telemetry(
        self, requests: AsyncIterator[spb.TelemetryCommand], context: Any
    ) -> AsyncIterator[spb.TelemetryCommand]:
        denied = self._denied(context)
        if denied is not None:
            yield spb.TelemetryCommand(status=denied)
            return
        outbound: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        client_id = client_id_of(context)
        channel = TelemetryChannel(client_id, Peer(context.peer()).peer, outbound)
        groups: set[str] = set()

        async def read() -> None:
            try:
                async for command in requests:
                    if command.HasField("settings"):
                        outbound.put_nowait(self._settings(command.settings, channel, groups))
            finally:
                outbound.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        live = self.renew.live_clients
        live[client_id] = live.get(client_id, 0) + 1
        try:
            while (item := await outbound.get()) is not None:
                yield item
        finally:
            reader.cancel()
            channel.close()
            live[client_id] -= 1
            if not live[client_id]:
                del live[client_id]
                self.renew.release_client(client_id)
            self._producers.pop(client_id, None)
            for group in groups:
                self.ctx.clients.unregister(client_id, channel, group, None)  # type: ignore[arg-type]

    def _settings(self, request: pb.Settings, channel: TelemetryChannel, groups: set[str]) -> spb.TelemetryCommand:
        """Settings answered at once; a producer becomes the check-back target of its topics' transactions."""
        group = None
        if request.HasField("subscription") and request.subscription.group.name:
            group = self.ctx.groups.find_or_create(request.subscription.group.name)
        if request.client_type == pb.PRODUCER:
            for topic in request.publishing.topics:
                groups.add(tx_group(topic.name))
            for tx in groups:
                self.ctx.clients.register_producer(channel.client_id, channel, tx, "PYTHON")  # type: ignore[arg-type]
            self._producers[channel.client_id] = (channel, groups)
        answered = settings.answer(request, self.ctx.config.max_message_size, group)
        return spb.TelemetryCommand(status=status(), settings=answered)

    # -- send ------------------------------------------------------------------------------
    def _refuse_send(self, request: spb.SendMessageRequest) -> pb.Status | None:
        messages = request.messages
        if not messages:
            return status(pb.BAD_REQUEST, "no message to send")
        if len(messages) > MAX_SEND_BATCH:
            return status(pb.PAYLOAD_TOO_LARGE, f"{len(messages)} messages in one request, over {MAX_SEND_BATCH}")
        topic = messages[0].topic.name
        if any(m.topic.name != topic for m in messages):
            return status(pb.BAD_REQUEST, "the messages of one request must share their topic")
        try:
            check_sendable(topic)
        except MessageError as exc:
            return status(pb.ILLEGAL_TOPIC, exc.remark)
        config = self._topic(topic, create=True)
        if config is None:
            return status(pb.TOPIC_NOT_FOUND, f"topic {topic!r} not found")
        accepted = self._accepted_types(topic)
        limit = self.ctx.config.max_message_size
        for m in messages:
            if not m.body:
                return status(pb.MESSAGE_BODY_EMPTY, "message body is empty")
            if len(m.body) > limit:
                return status(pb.MESSAGE_BODY_TOO_LARGE, f"message body of {len(m.body)} bytes, over {limit}")
            if not m.system_properties.message_id:
                return status(pb.ILLEGAL_MESSAGE_ID, "message id is empty")
            kind = convert.message_type(m)
            if kind not in accepted:
                return status(
                    pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"topic {topic!r} accepts {[pb.MessageType.Name(t) for t in accepted]}, "
                    f"not {pb.MessageType.Name(kind)} messages",
                )
        return None

    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        denied = self._denied(context, request.messages[0].topic.name if request.messages else "")
        if denied is not None:
            return spb.SendMessageResponse(status=denied)
        refusal = self._refuse_send(request)
        if refusal is not None:
            return spb.SendMessageResponse(status=refusal)
        topic = request.messages[0].topic.name
        config = self.ctx.topics.get(topic)
        assert config is not None
        born = born_host(context.peer())
        batches, wait = [], []
        max_level = len(self._level_millis)
        for m in request.messages:
            if m.system_properties.message_group:
                queue_id = (
                    zlib.crc32(m.system_properties.message_group.encode()) & 0x7FFFFFFF
                ) % config.write_queue_nums
            else:
                queue_id = next(self._round_robin) % config.write_queue_nums
            batch = convert.to_batch(m, queue_id, born, self._level_millis)
            if convert.message_type(m) == pb.TRANSACTION:
                self.ctx.topics.create_system_topic(TRANS_HALF_TOPIC, 1)
                batches.append(half_message(batch, tx_group(topic)))
            else:
                batches.append(redirect_if_delayed(batch, max_level))
            wait.append(True)
        results, durable = self.ctx.put_group(batches, wait)
        if durable is not None:
            results = await durable
        entries = []
        for m, batch, result in zip(request.messages, batches, results, strict=True):
            code = pb.OK if result.ok else PERSISTENCE_TIMEOUTS.get(result.status, pb.INTERNAL_SERVER_ERROR)
            text = "OK" if result.ok else f"{result.status.value} {result.remark}".strip()
            msg_id = m.system_properties.message_id
            offset = result.queue_offset if batch.topic == topic else 0
            entry = spb.SendResultEntry(status=status(code, text), message_id=msg_id, offset=offset)
            if batch.topic == TRANS_HALF_TOPIC and result.ok:
                entry.transaction_id = transaction_id(result.wrote_offset, result.queue_offset, msg_id)
            entries.append(entry)
        codes = {e.status.code for e in entries}
        overall = entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS, "some messages failed")
        return spb.SendMessageResponse(status=overall, entries=entries)

    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Any) -> spb.EndTransactionResponse:
        denied = self._denied(context, request.topic.name)
        if denied is not None:
            return spb.EndTransactionResponse(status=denied)
        parsed = parse_transaction_id(request.transaction_id)
        if parsed is None:
            reason = f"transaction id {request.transaction_id[:80]!r} is not one of this broker's"
            return spb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID, reason))
        commit_log_offset, queue_offset, txid = parsed
        resolution = {pb.COMMIT: COMMIT, pb.ROLLBACK: ROLLBACK}.get(request.resolution, 0)
        header = EndTransactionRequestHeader(
            tx_group(request.topic.name),
            queue_offset,
            commit_log_offset,
            resolution,
            request.message_id,
            request.source == pb.SOURCE_SERVER_CHECK,
            txid,
        )
        end = RemotingCommand.request(RequestCode.END_TRANSACTION, 0, ext_fields=header.to_fields())
        answer = await self.end_transaction(end, Peer(context.peer()))
        if answer.code != ResponseCode.SUCCESS:
            return spb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID, answer.remark or "refused"))
        return spb.EndTransactionResponse(status=status())


class GrpcServer:
    """The grpc.aio server of one broker."""

    def __init__(
        self, ctx: BrokerContext, pop: PopService, end_transaction: EndTransaction, acl: AclValidator | None
    ) -> None:
        self.ctx = ctx
        self.servicer = MessagingServicer(ctx, pop, end_transaction, acl)
        limit = ctx.config.max_message_size * 4 + (1 << 20)
        self.server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.servicer, self.server)

    async def start(self) -> int:
        host = self.ctx.config.listen_host or self.ctx.config.broker_ip
        port = int(self.server.add_insecure_port(f"{host}:{self.ctx.config.grpc_server_port}"))
        if port == 0:
            raise OSError(f"gRPC server cannot listen on {host}:{self.ctx.config.grpc_server_port}")
        await self.server.start()
        return port

    async def close(self) -> None:
        await self.server.stop(grace=1.0)
