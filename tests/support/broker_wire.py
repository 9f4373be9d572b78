"""Drive an in-process broker with real remoting frames, in the dialects real clients speak.

``run_broker(tmp_path, scenario)`` starts a :class:`BrokerController` on a free loopback port
with a small-segment store under ``tmp_path`` and runs ``await scenario(wire)`` inside one
event loop (``asyncio.run``); :class:`Wire` wraps a :class:`RemotingClient` with helpers for
the commands tests send. :class:`RawRequest` writes a JSON header verbatim, so extFields may
carry JSON numbers and ``"0"``/``"1"`` booleans as C++ 1.2.3 and ali-ons send them
(``RemotingCommand`` itself refuses non-string values).

>>> # def test_x(tmp_path): run_broker(tmp_path, scenario)
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.controller import BrokerController
from sparkmq.message.properties import encode_properties
from sparkmq.message.record import StoredMessage, iter_records
from sparkmq.protocol import PullSysFlag, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.frame import FrameDecoder
from sparkmq.remoting import RemotingClient
from sparkmq.remoting.connection import FrameLane, RequestHandler

TIMEOUT_S = 5.0
SMALL_COMMITLOG = 1 << 20  # 1 MiB segments: rolls are exercised by ordinary tests
SMALL_CONSUME_QUEUE = 1000 * 20  # 1000 units per ConsumeQueue file
SMALL_INDEX_SLOTS, SMALL_INDEX_ENTRIES = 5000, 20_000  # a 420 KB IndexFile, not the default 420 MB (preallocated)


def small_config(store_dir: Path, **overrides: Any) -> BrokerConfig:
    """A NameServer-less broker on a free port with small store segments."""
    values: dict[str, Any] = dict(
        listen_port=0,
        store_path_root_dir=store_dir,
        namesrv_addr="",
        mapped_file_size_commit_log=SMALL_COMMITLOG,
        mapped_file_size_consume_queue=SMALL_CONSUME_QUEUE,
        max_hash_slot_num=SMALL_INDEX_SLOTS,
        max_index_num=SMALL_INDEX_ENTRIES,
    )
    values.update(overrides)
    return BrokerConfig(**values)


class RawRequest:
    """A request frame whose JSON header is written as given (mixed JSON value types allowed).

    Duck-types the two things :meth:`RemotingConnection.request` uses: ``opaque``/``code`` and
    ``encode_parts()``.
    """

    def __init__(
        self,
        code: int,
        opaque: int,
        ext_fields: dict[str, Any],
        body: bytes = b"",
        language: str = "CPP",
        version: int = 63,
    ) -> None:
        self.code = code
        self.opaque = opaque
        self.body = body
        header = {
            "code": code,
            "extFields": ext_fields,
            "flag": 0,
            "language": language,
            "opaque": opaque,
            "remark": "",
            "version": version,
        }
        self.header = json.dumps(header, ensure_ascii=True).encode() + b"\n"  # jsoncpp ends with a newline

    def encode_parts(self) -> tuple[bytes, bytes]:
        head = struct.pack(">II", 4 + len(self.header) + len(self.body), len(self.header)) + self.header
        return head, self.body


def cpp_heartbeat(client_id: str, group: str, topics: dict[str, str]) -> bytes:
    """A HEART_BEAT body as C++ 1.2.3 writes it: integer enums, string subVersion, no empty sets."""
    subs = [{"subString": expr, "subVersion": "1700000000000", "topic": topic} for topic, expr in topics.items()]
    subs.append({"subString": "*", "subVersion": "1700000000000", "topic": f"%RETRY%{group}"})
    body = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "consumeFromWhere": 0,
                "consumeType": 1,
                "groupName": group,
                "messageModel": 1,
                "subscriptionDataSet": subs,
            }
        ],
    }
    return json.dumps(body).encode() + b"\n"


class Wire:
    """A client connection to the broker under test, with one helper per command used."""

    def __init__(self, broker: BrokerController, handler: RequestHandler | None = None) -> None:
        self.broker = broker
        self.address = broker.config.address
        self.client = RemotingClient(handler)

    async def call(
        self, code: int, fields: dict[str, str] | None = None, body: bytes = b"", timeout: float = TIMEOUT_S
    ) -> RemotingCommand:
        return await self.client.invoke(self.address, code, fields or {}, body, timeout)

    async def raw(self, code: int, fields: dict[str, Any], body: bytes = b"") -> RemotingCommand:
        """Send a request with a verbatim JSON header (C++ / ali-ons value types)."""
        connection = await self.client.connection(self.address)
        request = RawRequest(code, connection.next_opaque(), fields, body)
        return await connection.request(request, TIMEOUT_S)

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int = 0,
        props: dict[str, str] | None = None,
        queue_nums: int = 4,
        reconsume_times: int | None = None,
    ) -> RemotingCommand:
        """SEND_MESSAGE_V2 as the Java client sends it (every value a string)."""
        fields = {
            "a": "PID",
            "b": topic,
            "c": "TBW102",
            "d": str(queue_nums),
            "e": str(queue_id),
            "f": "0",
            "g": "1700000000000",
            "h": "0",
            "i": encode_properties(props or {}).decode(),
        }
        if reconsume_times is not None:
            fields["j"] = str(reconsume_times)
        return await self.call(RequestCode.SEND_MESSAGE_V2, fields, body)

    async def send_ok(self, topic: str, body: bytes, **kwargs: Any) -> dict[str, str]:
        response = await self.send(topic, body, **kwargs)
        assert response.code == ResponseCode.SUCCESS, response
        return response.ext_fields

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_nums: int = 32,
        subscription: str = "*",
        suspend_ms: int = 0,
        timeout: float = TIMEOUT_S,
    ) -> RemotingCommand:
        """PULL_MESSAGE with the subscription in the header (sysFlag 4, +2 when suspending)."""
        flags = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_ms else 0)
        fields = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(int(flags)),
            "commitOffset": "0",
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": subscription,
            "subVersion": "0",
        }
        return await self.call(RequestCode.PULL_MESSAGE, fields, timeout=timeout)

    async def pull_records(
        self, group: str, topic: str, queue_id: int, offset: int = 0, **kwargs: Any
    ) -> list[StoredMessage]:
        response = await self.pull(group, topic, queue_id, offset, **kwargs)
        if response.code != ResponseCode.SUCCESS:
            return []
        return list(iter_records(response.body, check_crc=True))

    async def heartbeat(self, client_id: str, group: str, topics: dict[str, str]) -> RemotingCommand:
        return await self.call(RequestCode.HEART_BEAT, body=cpp_heartbeat(client_id, group, topics))

    async def offset(self, code: int, topic: str, queue_id: int, **extra: str) -> RemotingCommand:
        return await self.call(code, {"topic": topic, "queueId": str(queue_id), **extra})

    async def close(self) -> None:
        await self.client.close()


Scenario = Callable[[Wire], Awaitable[None]]


async def serve(config: BrokerConfig, scenario: Scenario) -> None:
    async with BrokerController(config) as broker:
        wire = Wire(broker)
        try:
            await scenario(wire)
        finally:
            await wire.close()


def run_broker(store_dir: Path, scenario: Scenario, **overrides: Any) -> None:
    """Run ``scenario`` against a fresh broker over ``store_dir`` in its own event loop."""
    asyncio.run(serve(small_config(store_dir, **overrides), scenario))


def send_frame(opaque: int, body: bytes, topic: str, *, queue_id: str = "0", tags: str = "T") -> bytes:
    """An encoded SEND_MESSAGE_V2 request as a Java producer writes it (group PID_G, WAIT true,
    key ``k<opaque>``); ``queue_id`` as text, so a test may send a malformed one."""
    props = encode_properties({"TAGS": tags, "KEYS": f"k{opaque}", "UNIQ_KEY": f"U{opaque:08d}", "WAIT": "true"})
    fields = {
        "a": "PID_G",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": queue_id,
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": props.decode(),
        "j": "0",
        "k": "false",
        "m": "false",
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque, ext_fields=fields, body=body).encode()


def pull_frame(
    opaque: int, topic: str, *, queue_id: int = 0, offset: int = 0, sys_flag: int = 2, suspend_ms: int = 0
) -> bytes:
    """An encoded PULL_MESSAGE request of group CID_G for ``queue_id`` of ``topic`` from ``offset``."""
    fields = {
        "consumerGroup": "CID_G",
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(sys_flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subVersion": "0",
        "subscription": "*",
        "expressionType": "TAG",
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque, ext_fields=fields).encode()


async def one_write(port: int, frames: list[bytes]) -> dict[int, RemotingCommand]:
    """Write ``frames`` to the broker at ``port`` in one write; the responses by opaque."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(frames))
        decoder, responses = FrameDecoder(), {}
        while len(responses) < len(frames):
            data = await reader.read(65536)
            assert data, f"connection closed after {len(responses)} responses"
            for command in decoder.feed(data):
                responses[command.opaque] = command
        return responses
    finally:
        writer.close()
        await writer.wait_closed()


def counted_lane(lane: FrameLane | None) -> tuple[FrameLane, list[int]]:
    """``lane`` (a server's, which must be built) wrapped to record the bytes each call took."""
    assert lane is not None, "the lane was built"
    taken: list[int] = []

    def counted(buffer: bytes | bytearray, position: int, connection: Any) -> int:
        end = lane(buffer, position, connection)
        taken.append(end - position)
        return end

    return counted, taken
