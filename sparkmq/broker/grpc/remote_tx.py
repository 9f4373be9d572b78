"""Transactions through ``sparkmq proxy`` (Apache RocketMQ 5's ``ClusterTransactionService``).

A half message's producer group (``GRPC_TX_<topic>``) has no remoting client of its own behind a
proxy: the proxy heartbeats the brokers as that producer group while a 5.x producer of the topic
has its Telemetry stream open, so a broker's CHECK_TRANSACTION_STATE reaches the proxy. It is
relayed to one of those streams as a RecoverOrphanedTransactionCommand whose transaction id names
the broker; the client's answer (EndTransaction) goes back to that broker as END_TRANSACTION.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable, Collection

from rocketmq.grpc_protocol import definition_pb2 as pb

from sparkmq.broker.grpc.backend import TopicRoute
from sparkmq.broker.grpc.telemetry import (
    TX_GROUP_PREFIX,
    TelemetryChannel,
    end_header,
    parse_transaction_id,
    transaction_id,
)
from sparkmq.errors import RemoteError, SparkmqError
from sparkmq.message.properties import PRODUCER_GROUP
from sparkmq.message.record import decode_record
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.client_headers import CheckTransactionStateRequestHeader
from sparkmq.protocol.heartbeat import HeartbeatData, ProducerData

logger = logging.getLogger(__name__)
HEARTBEAT_S = 20.0  # Apache's transactionHeartbeatPeriodSecond
ToBroker = Callable[[str, int, dict[str, str], bytes], Awaitable[RemotingCommand]]
Route = Callable[[str], Awaitable[TopicRoute | None]]


def proxy_transaction_id(broker: str, commit_log_offset: int, queue_offset: int, uniq_id: str) -> str:
    """A half message's transaction id through the proxy: its broker group, then what that broker needs."""
    return f"{broker} {transaction_id(commit_log_offset, queue_offset, uniq_id)}"


class ProxyTransactions:
    """The producer groups of the proxy's transactional clients, heartbeated to the brokers of their topics."""

    def __init__(self, to_broker: ToBroker, route: Route, masters: dict[str, str]) -> None:
        self._to_broker = to_broker
        self._route = route
        self._masters = masters  # broker name -> master address, as the routes give them
        self.client_id = f"rmq-proxy-producer-client@{socket.gethostname()}#{os.getpid()}"
        self._channels: dict[str, dict[int, TelemetryChannel]] = {}  # producer group -> its clients' streams
        self._pending: set[asyncio.Task[None]] = set()

    def joined(self, channel: TelemetryChannel, groups: Collection[str]) -> None:
        """``channel`` answers check-backs of ``groups``; a group new to the proxy is heartbeated at once."""
        new = False
        for group in groups:
            new |= group not in self._channels
            self._channels.setdefault(group, {})[channel.id] = channel
        if new:
            task = asyncio.get_running_loop().create_task(self._heartbeat_now(), name="sparkmq-proxy-tx-heartbeat")
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _heartbeat_now(self) -> None:
        try:
            await self.heartbeat()
        except Exception:  # the periodic heartbeat tries again
            logger.exception("proxy: transaction heartbeat failed")

    def left(self, channel: TelemetryChannel, groups: Collection[str]) -> None:
        for group in groups:
            channels = self._channels.get(group, {})
            channels.pop(channel.id, None)
            if not channels:
                self._channels.pop(group, None)

    async def heartbeat(self) -> None:
        """HEART_BEAT to the master of each broker group of the producers' topics, naming their groups."""
        groups = sorted(self._channels)
        if not groups:
            return
        brokers: set[str] = set()
        for group in groups:
            route = await self._route(group[len(TX_GROUP_PREFIX) :])
            if route is not None:
                brokers.update(b for b, _, _ in route.brokers)
        body = HeartbeatData(self.client_id, tuple(ProducerData(g) for g in groups)).encode()
        for broker in sorted(brokers):
            try:
                response = await self._to_broker(broker, RequestCode.HEART_BEAT, {}, body)
            except RemoteError as exc:
                logger.warning("proxy: transaction heartbeat to %s: %s", broker, exc.remark)
                continue
            if response.code != ResponseCode.SUCCESS:
                logger.warning("proxy: transaction heartbeat refused by %s: %s", broker, response.remark)

    async def close(self) -> None:
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)

    def check(self, request: RemotingCommand, peer: str) -> None:
        """A broker's CHECK_TRANSACTION_STATE (from ``peer``, ``host:port``), relayed to a producer of its group."""
        try:
            header = CheckTransactionStateRequestHeader.from_fields(request.ext_fields)
            half = decode_record(request.body)
        except (SparkmqError, ValueError) as exc:
            logger.warning("proxy: a transaction check from %s cannot be read: %s", peer, exc)
            return
        brokers = [name for name, address in self._masters.items() if address == peer]
        if not brokers:
            logger.warning("proxy: a transaction check from %s, which is no master of the cluster", peer)
            return
        group = half.properties.get(PRODUCER_GROUP, "")
        channels = [c for c in self._channels.get(group, {}).values() if c.is_open]
        if not channels:
            logger.info("proxy: no producer of %r connected to answer the check of %s", group, header.transaction_id)
            return
        txid = proxy_transaction_id(
            brokers[0], header.commit_log_offset, header.tran_state_table_offset, header.transaction_id or ""
        )
        random.choice(channels).recover(half, txid)

    async def end(
        self, topic: str, txid: str, message_id: str, resolution: int, from_check: bool
    ) -> tuple[int, str] | None:
        """END_TRANSACTION at the broker the transaction id names; None, or the refusal's ``pb.Code`` and reason."""
        broker, _, rest = txid.partition(" ")
        ids = parse_transaction_id(rest)
        if ids is not None and broker not in self._masters:
            await self._route(topic)  # a proxy started since the half was sent learns its broker's master
        if ids is None or broker not in self._masters:
            return pb.INVALID_TRANSACTION_ID, f"transaction id {txid[:80]!r} names no half message of this cluster"
        header = end_header(topic, ids, resolution, message_id, from_check)
        try:
            response = await self._to_broker(broker, RequestCode.END_TRANSACTION, header.to_fields(), b"")
        except RemoteError as exc:
            return pb.PROXY_TIMEOUT, exc.remark
        if response.code != ResponseCode.SUCCESS:
            return pb.INVALID_TRANSACTION_ID, f"broker {broker}: {response.remark}"
        return None
