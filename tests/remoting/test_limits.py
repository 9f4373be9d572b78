"""What a hostile peer may cost a RemotingServer, over real loopback sockets.

Every test waits for an event (a server-side state, a socket's EOF, a response), never for time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable

import pytest

from sparkmq.protocol import MAX_FRAME_BYTES, FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient, RemotingConnection, RemotingServer, ServerLimits
from sparkmq.remoting.connection import WRITE_HIGH_WATER_BYTES

RESPONSE_BYTES = 1024 * 1024
served: list[int] = []


async def echo(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
    return request.make_response(ext_fields={"echo": request.ext_fields.get("x", "")})


async def big(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
    served.append(request.opaque)
    return request.make_response(body=bytes(RESPONSE_BYTES))


Body = Callable[[RemotingServer, RemotingClient, str, int], Awaitable[None]]


def run(body: Body, limits: ServerLimits | None = None) -> None:
    async def main() -> None:
        server = RemotingServer("127.0.0.1", 0, limits)
        server.register(RequestCode.HEART_BEAT, echo)
        server.register(RequestCode.PULL_MESSAGE, big)
        port = await server.start()
        client = RemotingClient()
        try:
            await body(server, client, f"127.0.0.1:{port}", port)
        finally:
            await client.close()
            await server.close()

    served.clear()
    asyncio.run(main())


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Wait for a condition another task makes true (a generous cap only turns a hang into a failure)."""
    for _ in range(3000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def healthy(client: RemotingClient, address: str, tag: str) -> None:
    response = await client.invoke(address, RequestCode.HEART_BEAT, {"x": tag})
    assert response.ext_fields["echo"] == tag


async def read_responses(reader: asyncio.StreamReader, count: int) -> list[RemotingCommand]:
    decoder, commands = FrameDecoder(), []
    while len(commands) < count:
        data = await reader.read(1 << 20)
        assert data, f"EOF after {len(commands)} of {count} responses"
        commands += decoder.feed(data)
    return commands


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """EOF, or a reset when the server closed with our bytes unread: both mean it hung up."""
    try:
        return await reader.read() == b""
    except ConnectionResetError:
        return True


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionResetError):  # the server hung up first, with our bytes unread
        await writer.wait_closed()


def test_a_peer_that_never_reads_pauses_reading_and_bounds_the_write_buffer() -> None:
    requests = 200  # 200 MiB of responses if nothing stopped them

    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await healthy(client, address, "warm")  # the healthy client's connection exists first
        writer.write(b"".join(RemotingCommand.request(RequestCode.PULL_MESSAGE, i).encode() for i in range(requests)))
        (hostile,) = [c for c in server.connections if c.peer[1] == writer.get_extra_info("sockname")[1]]
        await until(lambda: hostile.reading_paused and hostile.writes_paused, "writes paused")
        assert hostile.write_buffer_bytes <= WRITE_HIGH_WATER_BYTES + RESPONSE_BYTES + 1024
        assert len(served) < requests
        await healthy(client, address, "still served")
        responses = await read_responses(reader, requests)  # once it reads, every request is answered
        assert sorted(r.opaque for r in responses) == list(range(requests))
        await close(writer)

    run(body)


def test_commands_before_a_bad_frame_are_answered_then_the_connection_closes() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        good = [RemotingCommand.request(RequestCode.HEART_BEAT, i, ext_fields={"x": str(i)}).encode() for i in (1, 2)]
        writer.write(b"".join(good) + struct.pack(">I", 2) + b"xx")  # two requests, then a length below the minimum
        responses = await read_responses(reader, 2)
        assert [(r.opaque, r.ext_fields["echo"]) for r in responses] == [(1, "1"), (2, "2")]
        assert await reader.read() == b""
        await close(writer)
        await healthy(client, address, "after")

    run(body)


def _raw_request(opaque: int, ext_json: str, code: str = "34") -> bytes:
    header = (
        f'{{"code":{code},"flag":0,"language":"JAVA","opaque":{opaque},"version":0,"extFields":{ext_json}}}'.encode()
    )
    return struct.pack(">II", 4 + len(header), len(header)) + header


@pytest.mark.parametrize(
    ("ext_json", "field"),
    [
        ('{"x":"\\ud800"}', "'x' holds a lone surrogate"),
        ('{"x":"a\\u0000"}', "'x' holds a NUL"),
        ('{"x":"%s"}' % ("y" * 40_000), "'x' is 40000 characters long"),
    ],
)
def test_unfit_text_gets_an_error_answer_and_the_connection_keeps_serving(ext_json: str, field: str) -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_raw_request(5, ext_json) + _raw_request(6, '{"x":"ok"}'))
        refused, served_after = await read_responses(reader, 2)
        assert (refused.opaque, refused.code) == (5, ResponseCode.SYSTEM_ERROR) and field in (refused.remark or "")
        assert (served_after.opaque, served_after.code, served_after.ext_fields) == (6, 0, {"echo": "ok"})
        await close(writer)

    run(body)


def test_a_huge_integer_header_closes_the_connection_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_raw_request(7, "{}", code='"' + "9" * 5000 + '"'))
        assert await reader.read() == b""
        await close(writer)
        await healthy(client, address, "fine")

    with caplog.at_level(logging.WARNING):
        run(body)
    assert any("'code' is not an int32" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_a_response_that_cannot_be_encoded_is_answered_with_system_error() -> None:
    async def too_big(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        return request.make_response(body=bytes(MAX_FRAME_BYTES))

    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        server.register(RequestCode.SEND_MESSAGE, too_big)
        response = await client.invoke(address, RequestCode.SEND_MESSAGE)
        assert response.code == ResponseCode.SYSTEM_ERROR and "could not be encoded" in (response.remark or "")

    run(body)


def test_idle_connections_are_closed_and_busy_ones_kept() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.read() == b""  # closed by the idle timeout
        await close(writer)
        await until(lambda: not server.connections, "idle connection gone")
        await healthy(client, address, "reconnects")

    run(body, ServerLimits(idle_timeout_s=0.2))


def test_a_frame_that_never_finishes_is_closed_by_its_deadline(caplog: pytest.LogCaptureFixture) -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(RemotingCommand.request(RequestCode.HEART_BEAT, 1).encode()[:-3])  # all but 3 bytes
        assert await closed_by_server(reader)
        await close(writer)
        await until(lambda: server.frame_budget.used == 0, "budget released")
        await healthy(client, address, "fine")

    with caplog.at_level(logging.WARNING):
        run(body, ServerLimits(idle_timeout_s=None, frame_deadline_s=0.2))
    assert any("did not finish arriving" in r.getMessage() for r in caplog.records)


def test_connections_over_the_limit_are_refused_and_counted() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        await healthy(client, address, "first")
        kept = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        await until(lambda: len(server.connections) == 3, "three connections")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.read() == b""  # the fourth is closed at once
        await close(writer)
        assert server.refused_connections == 1 and len(server.connections) == 3
        await healthy(client, address, "kept")
        await close(kept[0][1])
        await until(lambda: len(server.connections) == 2, "one closed")
        again_reader, again_writer = await asyncio.open_connection("127.0.0.1", port)
        again_writer.write(RemotingCommand.request(RequestCode.HEART_BEAT, 9, ext_fields={"x": "in"}).encode())
        (response,) = await read_responses(again_reader, 1)
        assert response.ext_fields == {"echo": "in"}
        for _reader, kept_writer in [kept[1], (again_reader, again_writer)]:
            await close(kept_writer)

    run(body, ServerLimits(max_connections=3))


def test_unfinished_frames_of_all_connections_share_one_cap() -> None:
    partial = struct.pack(">I", MAX_FRAME_BYTES - 4) + bytes(10 * 1024 * 1024)  # 10 MiB of a 16 MiB frame

    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        first_reader, first = await asyncio.open_connection("127.0.0.1", port)
        first.write(partial)
        await until(lambda: server.frame_budget.used == len(partial), "first partial frame buffered")
        second_reader, second = await asyncio.open_connection("127.0.0.1", port)
        second.write(partial)
        assert await closed_by_server(second_reader)  # over the cap: closed
        await close(second)
        assert server.frame_budget.used == len(partial) and len(server.connections) == 1
        await healthy(client, address, "fine")
        await close(first)
        await until(lambda: server.frame_budget.used == 0, "released on close")

    run(body, ServerLimits(max_buffered_frame_bytes=MAX_FRAME_BYTES))


def test_a_peer_that_never_reads_is_closed_when_idle_even_with_requests_in_flight() -> None:
    async def body(server: RemotingServer, client: RemotingClient, address: str, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(RemotingCommand.request(RequestCode.PULL_MESSAGE, i).encode() for i in range(100)))
        writer.transport.pause_reading()  # our side stops reading too: the server's writes stay paused
        await until(lambda: not server.connections, "the stuck connection closed by the idle timeout")
        await healthy(client, address, "fine")
        await close(writer)

    run(body, ServerLimits(idle_timeout_s=0.3))


def test_broker_conf_keys_set_the_limits_and_bad_values_are_config_errors() -> None:
    from sparkmq.broker.config import BrokerConfig
    from sparkmq.errors import ConfigError

    config = BrokerConfig.from_properties(
        {
            "serverChannelMaxIdleTimeSeconds": "1",
            "serverMaxConnections": "7",
            "serverFrameDeadlineSeconds": "0.5",
            "serverMaxBufferedFrameBytes": str(2 * MAX_FRAME_BYTES),
        }
    )
    assert config.server_limits() == ServerLimits(7, 1.0, 0.5, 2 * MAX_FRAME_BYTES)
    assert BrokerConfig().server_limits() == ServerLimits()  # 120 s idle, as Java
    for bad in (
        {"max_connections": 0},
        {"idle_timeout_s": 0.0},
        {"frame_deadline_s": float("inf")},
        {"max_buffered_frame_bytes": 1024},
    ):
        with pytest.raises(ConfigError):
            ServerLimits(**bad)
