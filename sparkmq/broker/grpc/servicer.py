"""``apache.rocketmq.v2.MessagingService`` over the brokers of a ``backend.Backend`` (grpc.aio).

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
from sparkmq.broker.grpc import convert, settings, streams
from sparkmq.broker.grpc.backend import EndTransaction, LocalBackend, TopicRoute
from sparkmq.broker.grpc.calls import Peer, born_host, client_id_of, status
from sparkmq.broker.grpc.consume import ConsumeRpcs
from sparkmq.broker.grpc.telemetry import TelemetryChannel, tx_group
from sparkmq.broker.pop import PopService
from sparkmq.broker.topics import check_sendable
from sparkmq.errors import MessageError

logger = logging.getLogger(__name__)
MAX_SEND_BATCH = 1024  # messages in one SendMessage
MAX_LONG_POLLING_S = 30


class MessagingServicer(ConsumeRpcs, service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    """The RPCs of the 5.x clients over the brokers of ``backend`` (one broker: proxyMode=LOCAL; a cluster's:
    proxyMode=CLUSTER)."""

    # -- route -----------------------------------------------------------------------------
    @staticmethod
    def _queues(route: TopicRoute, endpoints: pb.Endpoints, queues: list[tuple[str, int]]) -> list[pb.MessageQueue]:
        types = route.accepted_types()
        return [
            pb.MessageQueue(
                topic=pb.Resource(name=route.name),
                id=q,
                permission=pb.READ_WRITE,
                broker=pb.Broker(name=broker, id=0, endpoints=endpoints),
                accept_message_types=types,
            )
            for broker, q in queues
        ]

    async def QueryRoute(self, request: spb.QueryRouteRequest, context: Any) -> spb.QueryRouteResponse:
        denied = self._denied(context)
        if denied is not None:
            return spb.QueryRouteResponse(status=denied)
        route = await self.backend.topic(request.topic.name, create=True)
        if route is None:
            return spb.QueryRouteResponse(status=status(pb.TOPIC_NOT_FOUND, f"topic {request.topic.name!r} not found"))
        queues = self._queues(route, request.endpoints, route.read_queues())
        return spb.QueryRouteResponse(status=status(), message_queues=queues)

    async def QueryAssignment(self, request: spb.QueryAssignmentRequest, context: Any) -> spb.QueryAssignmentResponse:
        denied = self._denied(context, request.topic.name, Perm.SUB, request.group.name)
        if denied is not None:
            return spb.QueryAssignmentResponse(status=denied)
        route = await self.backend.topic(request.topic.name)
        if route is None:
            return spb.QueryAssignmentResponse(
                status=status(pb.TOPIC_NOT_FOUND, f"topic {request.topic.name!r} not found")
            )
        group = await self.backend.group(request.group.name)
        if group is None:
            return spb.QueryAssignmentResponse(
                status=status(pb.CONSUMER_GROUP_NOT_FOUND, self.backend.group_refusal(request.group.name))
            )
        # a FIFO group is given each queue; others one assignment for every queue of each broker (id -1)
        ids = route.read_queues() if group.consume_message_orderly else [(b, -1) for b, _, _ in route.brokers]
        queues = self._queues(route, request.endpoints, ids)
        return spb.QueryAssignmentResponse(
            status=status(), assignments=[pb.Assignment(message_queue=q) for q in queues]
        )

    # -- client lifecycle ------------------------------------------------------------------
    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Any) -> spb.HeartbeatResponse:
        denied = self._denied(context)
        if denied is not None:
            return spb.HeartbeatResponse(status=denied)
        if request.group.name and await self.backend.group(request.group.name) is None:
            return spb.HeartbeatResponse(
                status=status(pb.CONSUMER_GROUP_NOT_FOUND, self.backend.group_refusal(request.group.name))
            )
        known = self._producers.get(client_id_of(context))
        if known is not None:
            self.backend.producer_joined(*known)
        return spb.HeartbeatResponse(status=status())

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Any
    ) -> spb.NotifyClientTerminationResponse:
        self.renew.release_client(client_id_of(context))
        self.end_long_polls(client_id_of(context))
        return spb.NotifyClientTerminationResponse(status=status())

    async def Telemetry(self, requests: AsyncIterator[spb.TelemetryCommand], context: Any) -> None:
        denied = self._denied(context)
        if denied is not None:
            await streams.deliver(context, spb.TelemetryCommand(status=denied))
            return
        outbound: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue()
        client_id = client_id_of(context)
        channel = TelemetryChannel(client_id, Peer(context.peer()).peer, outbound, streams.TELEMETRY_QUEUE)
        groups: set[str] = set()
        taken = asyncio.Event()  # the writer took a command: the reader may queue another

        async def read() -> None:
            try:
                async for command in requests:
                    if command.HasField("settings"):
                        while outbound.qsize() >= streams.TELEMETRY_QUEUE:  # the client sends but does not read
                            taken.clear()
                            await taken.wait()
                        outbound.put_nowait(await self._settings(command.settings, channel, groups))
            finally:
                outbound.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        live = self.renew.live_clients
        live[client_id] = live.get(client_id, 0) + 1
        try:
            try:
                item = await asyncio.wait_for(outbound.get(), streams.FIRST_SETTINGS_S)
            except TimeoutError:
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"no Settings within {streams.FIRST_SETTINGS_S:g} s"
                )
            while item is not None:
                taken.set()
                if not await streams.deliver(context, item):
                    await streams.end_stalled(context)
                item = await outbound.get()
        finally:
            reader.cancel()
            channel.close()
            live[client_id] -= 1
            if not live[client_id]:
                del live[client_id]
                self.renew.release_client(client_id)
            self._producers.pop(client_id, None)
            self.backend.client_left(channel, groups)

    async def _settings(
        self, request: pb.Settings, channel: TelemetryChannel, groups: set[str]
    ) -> spb.TelemetryCommand:
        """Settings answered at once; a producer becomes the check-back target of its topics' transactions."""
        group = None
        if request.HasField("subscription") and request.subscription.group.name:
            group = await self.backend.group(request.subscription.group.name)
        if request.client_type == pb.PRODUCER:
            for topic in request.publishing.topics:
                groups.add(tx_group(topic.name))
            self.backend.producer_joined(channel, groups)
            self._producers[channel.client_id] = (channel, groups)
        answered = settings.answer(request, self.backend.max_message_size, group)
        return spb.TelemetryCommand(status=status(), settings=answered)

    # -- send ------------------------------------------------------------------------------
    async def _refuse_send(self, request: spb.SendMessageRequest) -> tuple[pb.Status | None, TopicRoute | None]:
        messages = request.messages
        if not messages:
            return status(pb.BAD_REQUEST, "no message to send"), None
        if len(messages) > MAX_SEND_BATCH:
            return status(pb.PAYLOAD_TOO_LARGE, f"{len(messages)} messages in one request, over {MAX_SEND_BATCH}"), None
        topic = messages[0].topic.name
        if any(m.topic.name != topic for m in messages):
            return status(pb.BAD_REQUEST, "the messages of one request must share their topic"), None
        try:
            check_sendable(topic)
        except MessageError as exc:
            return status(pb.ILLEGAL_TOPIC, exc.remark), None
        route = await self.backend.topic(topic, create=True)
        if route is None:
            return status(pb.TOPIC_NOT_FOUND, f"topic {topic!r} not found"), None
        accepted = route.accepted_types()
        limit = self.backend.max_message_size
        for m in messages:
            if not m.body:
                return status(pb.MESSAGE_BODY_EMPTY, "message body is empty"), None
            if len(m.body) > limit:
                return status(pb.MESSAGE_BODY_TOO_LARGE, f"message body of {len(m.body)} bytes, over {limit}"), None
            if not m.system_properties.message_id:
                return status(pb.ILLEGAL_MESSAGE_ID, "message id is empty"), None
            kind = convert.message_type(m)
            if kind not in accepted:
                return status(
                    pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"topic {topic!r} accepts {[pb.MessageType.Name(t) for t in accepted]}, "
                    f"not {pb.MessageType.Name(kind)} messages",
                ), None
        return None, route

    async def SendMessage(self, request: spb.SendMessageRequest, context: Any) -> spb.SendMessageResponse:
        denied = self._denied(context, request.messages[0].topic.name if request.messages else "")
        if denied is not None:
            return spb.SendMessageResponse(status=denied)
        refusal, route = await self._refuse_send(request)
        if refusal is not None:
            return spb.SendMessageResponse(status=refusal)
        assert route is not None
        queues = route.write_queues()
        healthy = [q for q in queues if self.backend.available(q[0])] or queues
        born = born_host(context.peer())
        items = []
        for m in request.messages:
            if m.system_properties.message_group:  # a message group stays on one queue, so it stays in order
                hashed = zlib.crc32(m.system_properties.message_group.encode()) & 0x7FFFFFFF
                broker, queue_id = queues[hashed % len(queues)]
            else:
                broker, queue_id = healthy[next(self._round_robin) % len(healthy)]
            batch = convert.to_batch(m, queue_id, born, self.backend.level_millis)
            items.append((broker, batch, convert.message_type(m) == pb.TRANSACTION))
        outcomes = await self.backend.send(items)
        entries = []
        for m, outcome in zip(request.messages, outcomes, strict=True):
            msg_id = m.system_properties.message_id
            entry = spb.SendResultEntry(
                status=status(outcome.code, outcome.text), message_id=msg_id, offset=outcome.queue_offset
            )
            if outcome.transaction_id:
                entry.transaction_id = outcome.transaction_id
            entries.append(entry)
        codes = {e.status.code for e in entries}
        overall = entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS, "some messages failed")
        return spb.SendMessageResponse(status=overall, entries=entries)

    async def EndTransaction(self, request: spb.EndTransactionRequest, context: Any) -> spb.EndTransactionResponse:
        denied = self._denied(context, request.topic.name)
        if denied is not None:
            return spb.EndTransactionResponse(status=denied)
        refusal = await self.backend.end_transaction(
            request.topic.name,
            request.transaction_id,
            request.message_id,
            request.resolution,
            request.source == pb.SOURCE_SERVER_CHECK,
            Peer(context.peer()),
        )
        if refusal is not None:
            return spb.EndTransactionResponse(status=status(*refusal))
        return spb.EndTransactionResponse(status=status())


class GrpcServer:
    """The grpc.aio server of a broker's endpoint or of a proxy."""

    def __init__(self, servicer: MessagingServicer, host: str, port: int) -> None:
        self.servicer = servicer
        self.host, self.port = host, port
        limit = servicer.backend.max_message_size * 4 + (1 << 20)
        self.server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.servicer, self.server)

    @classmethod
    def local(
        cls, ctx: BrokerContext, pop: PopService, end_transaction: EndTransaction, acl: AclValidator | None
    ) -> GrpcServer:
        """A broker's own endpoint (proxyMode=LOCAL)."""
        servicer = MessagingServicer(LocalBackend(ctx, pop, end_transaction), acl)
        return cls(servicer, ctx.config.listen_host or ctx.config.broker_ip, ctx.config.grpc_server_port)

    async def start(self) -> int:
        port = int(self.server.add_insecure_port(f"{self.host}:{self.port}"))
        if port == 0:
            raise OSError(f"gRPC server cannot listen on {self.host}:{self.port}")
        await self.server.start()
        return port

    async def close(self) -> None:
        await self.server.stop(grace=1.0)
