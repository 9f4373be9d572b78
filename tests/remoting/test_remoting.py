"""The asyncio remoting layer over real loopback sockets."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest
import uvloop

from sparkmq.errors import RemoteError, TopicNotExistError
from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient, RemotingConnection, RemotingServer


async def echo(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
    return request.make_response(ext_fields={"echo": request.ext_fields.get("x", "")}, body=request.body)


async def slow(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
    await asyncio.sleep(float(request.ext_fields["sleep"]))
    return request.make_response()


async def failing(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
    raise TopicNotExistError("topic[nope] not exist")


async def with_server(body) -> None:
    server = RemotingServer("127.0.0.1", 0)
    server.register(RequestCode.HEART_BEAT, echo)
    server.register(RequestCode.PULL_MESSAGE, slow)
    server.register(RequestCode.SEND_MESSAGE, failing)
    port = await server.start()
    client = RemotingClient()
    try:
        await body(server, client, f"127.0.0.1:{port}")
    finally:
        await client.close()
        await server.close()


def test_request_response_and_unknown_code() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str) -> None:
        response = await client.invoke(address, RequestCode.HEART_BEAT, {"x": "1"}, b"payload")
        assert (response.code, response.ext_fields["echo"], response.body) == (0, "1", b"payload")
        unknown = await client.invoke(address, 9999)
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9999" in (unknown.remark or "")
        error = await client.invoke(address, RequestCode.SEND_MESSAGE)
        assert (error.code, error.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[nope] not exist")

    asyncio.run(with_server(body))


def test_a_parked_request_does_not_block_others_on_the_same_connection() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str) -> None:
        parked = asyncio.create_task(client.invoke(address, RequestCode.PULL_MESSAGE, {"sleep": "0.5"}))
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        quick = await client.invoke(address, RequestCode.HEART_BEAT, {"x": "q"})
        assert quick.ext_fields["echo"] == "q" and loop.time() - started < 0.3
        assert not parked.done()
        assert (await parked).code == 0

    asyncio.run(with_server(body))


def test_timeout_raises_a_retriable_remote_error() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str) -> None:
        with pytest.raises(RemoteError) as caught:
            await client.invoke(address, RequestCode.PULL_MESSAGE, {"sleep": "1"}, timeout=0.1)
        assert caught.value.retriable

    asyncio.run(with_server(body))


def test_a_short_deadline_behind_a_long_one_still_expires_first() -> None:
    """Deadlines share one timer per connection: a later, shorter one must re-arm it."""

    async def body(server: RemotingServer, client: RemotingClient, address: str) -> None:
        patient = asyncio.create_task(client.invoke(address, RequestCode.PULL_MESSAGE, {"sleep": "0.5"}, timeout=30))
        await client.invoke(address, RequestCode.HEART_BEAT, timeout=0.05)  # answered: its deadline is dropped
        with pytest.raises(RemoteError, match="timed out after 0.1 s"):
            await client.invoke(address, RequestCode.PULL_MESSAGE, {"sleep": "5"}, timeout=0.1)
        assert not patient.done()
        assert (await patient).code == 0
        assert (await client.invoke(address, RequestCode.HEART_BEAT, {"x": "after"})).ext_fields["echo"] == "after"

    asyncio.run(with_server(body))


def test_deadlines_under_a_millisecond_on_uvloop() -> None:
    """uvloop gives a plain Handle (no ``when()``) for a timer due within 1 ms; the deadline sweep
    must neither trip over it when a later request arrives nor miss the short deadline."""

    async def body(server: RemotingServer, client: RemotingClient, address: str) -> None:
        await client.invoke(address, RequestCode.HEART_BEAT)  # connected: the next requests only wait
        # both tasks start in one loop turn: the second arrives while the first's timer is a plain Handle
        hurried = asyncio.create_task(client.invoke(address, RequestCode.PULL_MESSAGE, {"sleep": "5"}, timeout=1e-4))
        patient = asyncio.create_task(client.invoke(address, RequestCode.PULL_MESSAGE, {"sleep": "0.2"}, timeout=30))
        with pytest.raises(RemoteError, match="timed out"):
            await hurried
        assert (await patient).code == 0

    uvloop.run(with_server(body))


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xc7" + random.Random(1).randbytes(4095),
        struct.pack(">I", 24) + random.Random(2).randbytes(24),
        struct.pack(">I", 2**31) + b"\x00" * 16,
        struct.pack(">II", 12, 8) + b"not json",
    ],
    ids=["random-bytes", "random-header", "2GiB-length", "non-json-header"],
)
def test_a_bad_frame_closes_only_its_connection(garbage: bytes) -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str) -> None:
        host, port = address.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(garbage)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 2) == b""  # closed by the server
        writer.close()
        await writer.wait_closed()
        healthy = await client.invoke(address, RequestCode.HEART_BEAT, {"x": "still"})
        assert healthy.ext_fields["echo"] == "still"

    asyncio.run(with_server(body))


def test_raw_socket_gets_byte_exact_response_frames() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str) -> None:
        host, port = address.split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(RemotingCommand.request(RequestCode.HEART_BEAT, 77, ext_fields={"x": "raw"}).encode())
        await writer.drain()
        decoder = FrameDecoder()
        commands: list[RemotingCommand] = []
        while not commands:
            commands = decoder.feed(await reader.read(65536))
        assert (commands[0].opaque, commands[0].is_response, commands[0].ext_fields) == (77, True, {"echo": "raw"})
        writer.close()
        await writer.wait_closed()

    asyncio.run(with_server(body))


def test_server_sees_closed_connections() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str) -> None:
        closed: list[int] = []
        server.on_connection_closed(lambda connection: closed.append(connection.id))
        await client.invoke(address, RequestCode.HEART_BEAT)
        await client.close()
        for _ in range(50):
            if closed:
                break
            await asyncio.sleep(0.01)
        assert len(closed) == 1 and not server.connections

    asyncio.run(with_server(body))
