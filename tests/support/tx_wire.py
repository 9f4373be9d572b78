"""A transactional producer spoken frame by frame, as RocketMQ's clients speak it (for broker tests).

``TxWire`` sends half messages (SEND_MESSAGE_V2, sysFlag PREPARED, ``TRAN_MSG`` / ``PGROUP``),
END_TRANSACTION as a request (so a test sees the broker's answer; real clients send it oneway)
and heartbeats as a producer of its group. CHECK_TRANSACTION_STATE requests the broker sends
back land in ``checks`` (an asyncio.Queue), for the test to await and answer.

>>> # async with TxWire(address, "PID_TX") as tx:
>>> #     half = await tx.prepare("T", b"x"); await tx.end(half, COMMIT)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from sparkmq.message import layout as L
from sparkmq.message.msgid import UniqueIdGenerator, decode_offset_msg_id
from sparkmq.message.properties import encode_properties
from sparkmq.message.record import StoredMessage, decode_record, iter_records
from sparkmq.protocol import PullSysFlag, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from sparkmq.protocol.heartbeat import HeartbeatData, ProducerData
from sparkmq.remoting import RemotingClient, RemotingConnection
from support.broker_wire import RawRequest

COMMIT, ROLLBACK, UNKNOWN = L.TRANSACTION_COMMIT_TYPE, L.TRANSACTION_ROLLBACK_TYPE, L.TRANSACTION_NOT_TYPE
TIMEOUT_S = 10.0
_IDS = UniqueIdGenerator()


@dataclass(frozen=True)
class Half:
    """What a producer knows of a stored half message (from the send response)."""

    uniq_key: str
    queue_offset: int
    commit_log_offset: int
    offset_msg_id: str


@dataclass(frozen=True)
class Check:
    """A CHECK_TRANSACTION_STATE the broker sent, decoded."""

    header: CheckTransactionStateRequestHeader
    message: StoredMessage
    raw: RemotingCommand

    @property
    def half(self) -> Half:
        h = self.header
        return Half(h.msg_id or "", h.tran_state_table_offset, h.commit_log_offset, h.offset_msg_id or "")


class TxWire:
    """One producer connection to a broker at ``address``."""

    def __init__(self, address: str, group: str) -> None:
        self.address = address
        self.group = group
        self.checks: asyncio.Queue[Check] = asyncio.Queue()
        self.client = RemotingClient(self._serve)

    async def _serve(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | None:
        assert request.code == RequestCode.CHECK_TRANSACTION_STATE and request.is_oneway, request
        header = CheckTransactionStateRequestHeader.from_fields(request.ext_fields)
        await self.checks.put(Check(header, decode_record(request.body, check_crc=True), request))
        return None

    async def __aenter__(self) -> TxWire:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.client.close()

    async def call(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        return await self.client.invoke(self.address, code, fields, body, TIMEOUT_S)

    async def raw(self, code: int, fields: dict[str, Any], body: bytes = b"") -> RemotingCommand:
        """A request with a verbatim JSON header (as C++ writes it: CPP, version 63)."""
        connection = await self.client.connection(self.address)
        request = RawRequest(code, connection.next_opaque(), fields, body)
        return await connection.request(request, TIMEOUT_S)

    async def heartbeat(self) -> None:
        body = HeartbeatData(f"127.0.0.1@tx-{self.group}", (ProducerData(self.group),)).encode()
        response = await self.call(RequestCode.HEART_BEAT, {}, body)
        assert response.code == ResponseCode.SUCCESS, response

    async def prepare(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int = 1,
        props: dict[str, str] | None = None,
        sys_flag: int = L.TRANSACTION_PREPARED_TYPE,
    ) -> Half:
        uniq = _IDS.next_id()
        properties = {"TAGS": "TagTx", "TRAN_MSG": "true", "PGROUP": self.group, "UNIQ_KEY": uniq, **(props or {})}
        fields = {
            "a": self.group,
            "b": topic,
            "c": "TBW102",
            "d": "4",
            "e": str(queue_id),
            "f": str(sys_flag),
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": encode_properties(properties).decode(),
        }
        response = await self.call(RequestCode.SEND_MESSAGE_V2, fields, body)
        assert response.code == ResponseCode.SUCCESS, response
        offset_id = response.ext_fields["msgId"]
        return Half(uniq, int(response.ext_fields["queueOffset"]), decode_offset_msg_id(offset_id)[2], offset_id)

    async def end(
        self,
        half: Half,
        kind: int,
        *,
        group: str | None = None,
        from_check: bool = False,
        queue_offset: int | None = None,
        commit_log_offset: int | None = None,
    ) -> RemotingCommand:
        header = EndTransactionRequestHeader(
            group or self.group,
            half.queue_offset if queue_offset is None else queue_offset,
            half.commit_log_offset if commit_log_offset is None else commit_log_offset,
            kind,
            half.uniq_key,
            from_check,
            half.uniq_key,
        )
        return await self.call(RequestCode.END_TRANSACTION, header.to_fields())

    async def end_ok(self, half: Half, kind: int, **kwargs: object) -> str:
        response = await self.end(half, kind, **kwargs)
        assert response.code == ResponseCode.SUCCESS, response
        return response.remark or ""

    async def next_check(self) -> Check:
        return await asyncio.wait_for(self.checks.get(), TIMEOUT_S)

    async def read(self, topic: str, queue_id: int) -> list[StoredMessage]:
        """Every record a queue holds, from offset 0 (one PULL of up to 256)."""
        fields = {
            "consumerGroup": "CID_TX_READER",
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": "0",
            "maxMsgNums": "256",
            "sysFlag": str(int(PullSysFlag.SUBSCRIPTION)),
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
        }
        response = await self.call(RequestCode.PULL_MESSAGE, fields)
        if response.code != ResponseCode.SUCCESS:
            return []
        return list(iter_records(response.body, check_crc=True))
