"""What every RPC of the gRPC endpoint shares: statuses, request metadata, the peer, the ACL check."""

from __future__ import annotations

import asyncio
import functools
import itertools
import socket
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from sparkmq.broker.acl.accounts import Perm
from sparkmq.broker.acl.validator import AclDenied, AclValidator
from sparkmq.broker.grpc.backend import Backend
from sparkmq.broker.grpc.renew import AutoRenew
from sparkmq.broker.grpc.telemetry import TelemetryChannel
from sparkmq.message.names import retry_topic
from sparkmq.message.record import Host

CLIENT_ID_HEADER = "x-mq-client-id"


def status(code: int = pb.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


def metadata(context: Any, name: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else bytes(value).decode()
    return ""


def client_id_of(context: Any) -> str:
    return metadata(context, CLIENT_ID_HEADER)


class Peer:
    """The ``peer`` an END_TRANSACTION processor logs, for an EndTransaction RPC."""

    def __init__(self, peer: str) -> None:
        host = born_host(peer)
        self.peer = (socket.inet_ntoa(host.ip), host.port)


def tags_of(expression: pb.FilterExpression) -> set[str] | None:
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    return {tag.strip() for tag in text.split("||") if tag.strip()}


@functools.lru_cache(maxsize=4096)  # one parse per client connection, not per send
def born_host(peer: str) -> Host:
    """``ipv4:127.0.0.1:5000`` as a record's born host (0.0.0.0 for anything else)."""
    _scheme, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    try:
        return Host(socket.inet_aton(host), int(port))
    except (OSError, ValueError):
        return Host(b"\x00\x00\x00\x00", 0)


class RpcBase:
    """The collaborators of the RPCs (the brokers behind them: ``backend``) and the ACL check each starts with."""

    def __init__(self, backend: Backend, acl: AclValidator | None) -> None:
        self.backend = backend
        self.acl = acl
        self.renew = AutoRenew(backend, backend.default_invisible_ms)
        self._producers: dict[str, tuple[TelemetryChannel, set[str]]] = {}  # client id -> stream, tx groups
        self._round_robin = itertools.count()
        self._long_polls: dict[str, set[asyncio.Task[Any]]] = {}  # client id -> its parked receives

    def _denied(self, context: Any, topic: str = "", topic_perm: Perm = Perm.PUB, group: str = "") -> pb.Status | None:
        """With ``aclEnable``: the refusal of a request whose signature or permissions do not pass."""
        if self.acl is None:
            return None
        needed = {topic: topic_perm} if topic else {}
        if group:
            needed[retry_topic(group)] = Perm.SUB
        host = born_host(context.peer())
        try:
            authorization = metadata(context, "authorization")
            self.acl.check_grpc(authorization, metadata(context, "x-mq-date-time"), socket.inet_ntoa(host.ip), needed)
        except AclDenied as exc:
            code = (
                pb.FORBIDDEN if exc.remark.startswith(("No permission", "No default permission")) else pb.UNAUTHORIZED
            )
            return status(code, exc.remark)
        return None
