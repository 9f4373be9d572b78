"""Hostile peers for tests: raw frames (any header text), a blocking raw socket, a healthy client.

``raw_request`` writes its JSON header with ``ensure_ascii``, so a lone surrogate travels as the
escape ``\\ud800`` (what an attacker sends; sparkmq's own encoder would escape the backslash).

>>> RemotingCommand.decode(raw_request(105, 1, {"topic": "Nope\\ud800"})[4:]).defect.field
'topic'
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import struct
import threading
import time

from sparkmq.errors import ProtocolError, RemoteError
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
    extfields = json.dumps(ext)
    fixed = f'"flag":0,"language":"JAVA","opaque":{opaque},"version":0'
    header = f'{{"code":{code_json},{fixed},"extFields":{extfields}}}'.encode()
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
        header = SendMessageRequestHeaderV2(
            "healthy-producer", self.topic, "TBW102", 4, self.queue_id, 0, int(time.time() * 1000), 0, None
        )
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


class HealthyLoop:
    """A :class:`HealthyClient` doing round trips on its own thread until :meth:`stop`.

    >>> # with HealthyLoop(broker.address) as healthy: ...hostile traffic...; then healthy.stop()
    """

    def __init__(self, broker: str, topic: str = "HealthyTopic") -> None:
        self.broker, self.topic = broker, topic
        self.round_trips = 0
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="healthy-client", daemon=True)

    def __enter__(self) -> HealthyLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_for_round_trips(self, count: int) -> None:
        """Block until ``count`` more round trips succeeded (or one failed)."""
        target = self.round_trips + count
        while self.round_trips < target and self.failure is None and self._thread.is_alive():
            self._stop.wait(0.01)

    def stop(self) -> None:
        """End the loop, having checked every acknowledged message is still there; raise its failure."""
        self._stop.set()
        self._thread.join(60)
        if self.failure is not None:
            raise AssertionError(f"the healthy client failed after {self.round_trips} round trips") from self.failure

    async def _main(self) -> None:
        client = RemotingClient()
        healthy = HealthyClient(client, self.broker, self.topic)
        try:
            while not self._stop.is_set():
                await healthy.round_trip(f"healthy-{self.round_trips}")
                self.round_trips += 1
            await healthy.check_nothing_lost()
        except BaseException as exc:  # handed to the test thread by stop()
            self.failure = exc
        finally:
            await client.close()


def expected_answers(stream: bytes) -> list[int]:
    """Opaques of the requests in ``stream`` a server must answer: every non-oneway request decoded
    before the first bad frame or the unfinished tail (the same sans-I/O decoder the server runs)."""
    decoder, opaques = FrameDecoder(), []
    decoder.receive_data(stream)
    while True:
        try:
            command = decoder.next_command()
        except ProtocolError:
            return opaques
        if command is None:
            return opaques
        if not command.is_response and not command.is_oneway:
            opaques.append(command.opaque)


def exchange(address: str, stream: bytes) -> list[RemotingCommand]:
    """Send ``stream``, half-close, and read every response until the server closes."""
    with RawPeer(address) as peer:
        try:
            peer.send(stream)
            peer.sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server already hung up on an earlier bad frame; its answers are still readable
        except OSError as exc:  # shutdown after the server's reset was seen: ENOTCONN, the same case
            if exc.errno != errno.ENOTCONN:
                raise
        responses: list[RemotingCommand] = []
        try:
            while data := peer.sock.recv(1 << 20):
                responses += peer._decoder.feed(data)
        except ConnectionResetError:
            pass  # closed with our bytes unread: what it answered before is in ``responses``
        return responses
