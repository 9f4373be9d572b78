"""ClientConnection's lean responses (``request_lean``) against a scripted server over real sockets.

Every answer must reach its waiter as the reference decoder reads it: plain headers as a
``LeanResponse`` with the same fields, anything else as the reference's ``RemotingCommand``,
whatever the chunking and whatever is interleaved; bad frames still close the connection.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from sparkmq.errors import RemoteError
from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode, decode_frame
from sparkmq.remoting import RemotingClient, RemotingConnection
from sparkmq.remoting.client_connection import LEAN_ANSWERS, ClientConnection

Script = Callable[[list[RemotingCommand], asyncio.StreamWriter], Awaitable[None]]


def lean(result: object) -> bool:
    """An answer read without the reference decoder: a LeanResponse (or the C split's Answer)."""
    return isinstance(result, LEAN_ANSWERS)


def code_of(result: object) -> int:
    return result.code  # type: ignore[attr-defined]


async def scripted(script: Script, count: int, test: Callable[[ClientConnection], Awaitable[None]]) -> None:
    """A server that reads ``count`` requests, then runs ``script`` on them; ``test`` drives the client."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder, requests = FrameDecoder(), []
        while len(requests) < count and (data := await reader.read(65536)):
            requests += decoder.feed(data)
        await script(requests, writer)
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = RemotingClient(handler=served)
    try:
        connection = await client.connection(f"127.0.0.1:{port}")
        assert isinstance(connection, ClientConnection)
        await test(connection)
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


async def served(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
    return request.make_response(ext_fields={"served": str(request.code)})


def send(connection: ClientConnection, timeout: float = 10.0) -> tuple[int, asyncio.Future[object]]:
    opaque = connection.next_opaque()
    frame = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque, ext_fields={"b": "T"}, body=b"x").encode()
    return opaque, connection.request_lean(opaque, RequestCode.SEND_MESSAGE_V2, frame, timeout)


async def write_in_chunks(writer: asyncio.StreamWriter, stream: bytes, most: int) -> None:
    """``stream`` in writes of 1 to ``most`` bytes (seeded; one write if ``most`` covers it), each drained."""
    rng, position = random.Random(most), 0
    while position < len(stream):
        size = most if most >= len(stream) else rng.randint(1, most)
        writer.write(stream[position : position + size])
        await writer.drain()
        position += size


def answers(requests: list[RemotingCommand]) -> list[bytes]:
    """One answer per request, of every shape in turn: plain, a remark, a body, a number in extFields,
    non-ASCII text, no extFields, extFields null, an error code."""
    shapes = [
        lambda r: r.make_response(ext_fields={"msgId": "AB", "queueId": "1", "queueOffset": "7"}).encode(),
        lambda r: r.make_response(ResponseCode.FLUSH_DISK_TIMEOUT, remark="disk slow").encode(),
        lambda r: r.make_response(ext_fields={"msgId": "AB"}, body=b"a body").encode(),
        lambda r: _with_header(r, b'"extFields":{"msgId":"AB","queueOffset":7}'),
        lambda r: r.make_response(remark="d\u00e9j\u00e0 vu", ext_fields={"msgId": "\u00e9"}).encode(),
        lambda r: _with_header(r, b'"remark":null'),
        lambda r: _with_header(r, b'"extFields":null'),
        lambda r: r.make_response(ResponseCode.SYSTEM_BUSY, remark="busy").encode(),
    ]
    return [shapes[i % len(shapes)](request) for i, request in enumerate(requests)]


def _with_header(request: RemotingCommand, extra: bytes) -> bytes:
    header = b'{"code":0,"flag":1,"opaque":%d,%s}' % (request.opaque, extra)
    return (len(header) + 4).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header


def assert_same_as_reference(result: object, frame: bytes) -> None:
    reference = decode_frame(frame)
    if lean(result):
        assert reference.body == b""
        fields = result.ext_fields or {}
        assert (result.code, result.opaque, result.remark, fields) == (
            reference.code,
            reference.opaque,
            reference.remark,
            reference.ext_fields,
        )
    else:
        assert result == reference


@pytest.mark.parametrize("chunking", ["whole", "bytes", "random"])
def test_every_answer_reaches_its_waiter_as_the_reference_reads_it(chunking: str) -> None:
    count = 40
    frames: list[bytes] = []

    async def script(requests: list[RemotingCommand], writer: asyncio.StreamWriter) -> None:
        frames.extend(answers(requests))
        # a request from the server between the answers: the client's handler serves it
        stream = b"".join(frames[:20]) + RemotingCommand.request(RequestCode.HEART_BEAT, 99).encode()
        stream += b"".join(frames[20:])
        await write_in_chunks(writer, stream, {"whole": len(stream), "bytes": 1, "random": 400}[chunking])

    async def test(connection: ClientConnection) -> None:
        sent = [send(connection) for _ in range(count)]
        results = [await future for _, future in sent]
        for (opaque, _), result, frame in zip(sent, results, frames, strict=True):
            assert result.opaque == opaque  # type: ignore[attr-defined]
            assert_same_as_reference(result, frame)
        if chunking == "whole":  # the two plain answers before the first with a body are lean
            assert [lean(result) for result in results[:3]] == [True, True, False]

    asyncio.run(scripted(script, count, test))


def test_plain_answers_in_any_chunks_are_all_lean() -> None:
    count = 50

    async def script(requests: list[RemotingCommand], writer: asyncio.StreamWriter) -> None:
        stream = b"".join(
            r.make_response(ext_fields={"msgId": "AB", "queueOffset": str(i)}).encode() for i, r in enumerate(requests)
        )
        await write_in_chunks(writer, stream, 300)

    async def test(connection: ClientConnection) -> None:
        sent = [send(connection) for _ in range(count)]
        results = [await future for _, future in sent]
        assert all(lean(result) for result in results)
        offsets = [int(r.ext_fields["queueOffset"]) for r in results]  # type: ignore[attr-defined]
        assert offsets == list(range(count))

    asyncio.run(scripted(script, count, test))


def test_a_bad_frame_after_lean_answers_closes_the_connection_and_fails_the_rest() -> None:
    async def script(requests: list[RemotingCommand], writer: asyncio.StreamWriter) -> None:
        writer.write(b"".join(answers(requests[:2])) + b"\x00\x00\x00\x02\x00\x00")  # length 2 < minimum
        await writer.drain()

    async def test(connection: ClientConnection) -> None:
        sent = [send(connection) for _ in range(3)]
        first, second = await sent[0][1], await sent[1][1]
        assert lean(first) and code_of(first) == 0
        assert lean(second) and second.code == ResponseCode.FLUSH_DISK_TIMEOUT
        with pytest.raises(RemoteError, match="closed") as caught:
            await sent[2][1]
        assert caught.value.retriable
        await connection.wait_closed()

    asyncio.run(scripted(script, 3, test))


def test_an_unanswered_lean_request_times_out_and_a_late_answer_is_dropped() -> None:
    async def script(requests: list[RemotingCommand], writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.3)
        writer.write(b"".join(answers(requests)))
        await writer.drain()

    async def test(connection: ClientConnection) -> None:
        _, late = send(connection, timeout=0.05)
        with pytest.raises(RemoteError, match="timed out") as caught:
            await late
        assert caught.value.retriable
        opaque, answered = send(connection)  # sent after the timeout; its answer follows the late one
        assert (await answered).opaque == opaque  # type: ignore[attr-defined]
        assert connection.is_open

    asyncio.run(scripted(script, 2, test))


def test_a_cancelled_waiter_is_forgotten() -> None:
    async def script(requests: list[RemotingCommand], writer: asyncio.StreamWriter) -> None:
        writer.write(b"".join(answers(requests)))
        await writer.drain()

    async def test(connection: ClientConnection) -> None:
        opaque, future = send(connection)
        future.cancel()
        connection.forget(opaque)
        other_opaque, other = send(connection)
        assert (await other).opaque == other_opaque  # the cancelled one's answer came first and was dropped

    asyncio.run(scripted(script, 2, test))


def test_an_answer_nobody_waits_for_between_plain_ones_is_dropped_and_the_rest_still_arrive() -> None:
    async def script(requests: list[RemotingCommand], writer: asyncio.StreamWriter) -> None:
        plain = [r.make_response(ext_fields={"msgId": "AB", "queueOffset": str(r.opaque)}).encode() for r in requests]
        writer.write(b"".join(plain))  # one read: the forgotten one's answer mid-run
        await writer.drain()

    async def test(connection: ClientConnection) -> None:
        sent = [send(connection) for _ in range(4)]
        forgotten, future = sent.pop(1)
        future.cancel()
        connection.forget(forgotten)
        for opaque, waiting in sent:
            assert (await waiting).ext_fields == {"msgId": "AB", "queueOffset": str(opaque)}  # type: ignore[attr-defined]
        assert connection.is_open

    asyncio.run(scripted(script, 4, test))
