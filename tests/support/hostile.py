"""Hostile peers for tests: raw frames (any header text), a blocking raw socket, a healthy client.

``raw_request`` writes its JSON header with ``ensure_ascii``, so a lone surrogate travels as the
escape ``\\ud800`` (what an attacker sends; sparkmq's own encoder would escape the backslash).

>>> RemotingCommand.decode(raw_request(105, 1, {"topic": "Nope\\ud800"})[4:]).defect.field
'topic'
"""

from __future__ import annotations

import json
import socket
import struct
import time

from sparkmq.errors import RemoteError
from sparkmq.message import iter_records
from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2
from sparkmq.remoting import RemotingClient

RETRIES = 3  # a connection the server closed as idle just as we sent: retried, as real clients do

SOCKET_TIMEOUT_S = 20.0  # only turns a hang into a failure


def raw_frame(header: bytes, body: bytes = b"") -> bytes:
    """A frame with exactly this JSON header text (no checks at all)."""
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def raw_request(code: int | str, opaque: int, ext: dict[str, str], *, body: bytes = b"") -> bytes:
    """A JSON request whose strings may hold anything, surrogates included (as ``\\u`` escapes)."""
    code_json = code if isinstance(code, str) else str(code)
    header = ('{"code":%s,"flag":0,"language":"JAVA","opaque":%d,"version":0,"extFields":%s}'
              % (code_json, opaque, json.dumps(ext))).encode()
    return raw_frame(header, body)


class RawPeer:
    """A blocking TCP socket that writes whatever it is given and reads whole response frames."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S)
        self._decoder = FrameDecoder()
        self._ready: list[RemotingCommand] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def responses(self, count: int) -> list[RemotingCommand]:
        """The next ``count`` response frames (fails on EOF)."""
        while len(self._ready) < count:
            data = self.sock.recv(1 << 20)
            assert data, f"EOF after {len(self._ready)} of {count} responses"
            self._ready += self._decoder.feed(data)
        taken, self._ready = self._ready[:count], self._ready[count:]
        return taken

    def closed_by_server(self) -> bool:
        """Read until the server hangs up: EOF, or a reset when our bytes were left unread."""
        try:
            while self.sock.recv(1 << 20):
                pass
        except ConnectionResetError:
            pass  # a reset is the server closing too
        return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class HealthyClient:
    """Sends unique messages to one queue and reads each back; remembers what was acknowledged."""

    def __init__(self, client: RemotingClient, broker: str, topic: str = "HealthyTopic", queue_id: int = 0) -> None:
        self.client, self.broker, self.topic, self.queue_id = client, broker, topic, queue_id
        self.acknowledged: dict[int, bytes] = {}

    async def invoke(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        for attempt in range(RETRIES):
            try:
                return await self.client.invoke(self.broker, code, fields, body)
            except RemoteError as exc:
                if not exc.retriable or attempt == RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def round_trip(self, tag: str) -> None:
        """Send one message, check SUCCESS, pull it back by its offset and compare the body."""
        body = f"{tag}-{time.monotonic_ns()}".encode()
        header = SendMessageRequestHeaderV2("healthy-producer", self.topic, "TBW102", 4, self.queue_id, 0,
                                            int(time.time() * 1000), 0, None)
        sent = await self.invoke(RequestCode.SEND_MESSAGE_V2, header.to_fields(), body)
        assert sent.code == ResponseCode.SUCCESS, (sent.code, sent.remark)
        offset = int(sent.ext_fields["queueOffset"])
        self.acknowledged[offset] = body
        assert (await self.pull(offset, 1)) == {offset: body}

    async def pull(self, offset: int, count: int) -> dict[int, bytes]:
        header = PullMessageRequestHeader("healthy-consumer", self.topic, self.queue_id, offset, count, 0, 0, 0, 0)
        response = await self.invoke(RequestCode.PULL_MESSAGE, header.to_fields())
        assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
        return {m.queue_offset: bytes(m.body) for m in iter_records(response.body, check_crc=True)}

    async def check_nothing_lost(self) -> None:
        """Every acknowledged message is still there, with its body."""
        if not self.acknowledged:
            return
        first, last = min(self.acknowledged), max(self.acknowledged)
        stored: dict[int, bytes] = {}
        while first <= last:
            batch = await self.pull(first, 1024)
            stored.update(batch)
            first = max(batch) + 1
        assert {o: stored.get(o) for o in self.acknowledged} == self.acknowledged
