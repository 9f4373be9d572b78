"""ClientConnection writes a loop turn's lean requests in chunks of ``LEAN_CHUNK_FRAMES``, over real sockets.

A chunk goes on the wire while the turn is still producing requests (so the peer can start on it),
unless the peer has a part of a chunk (``LEAN_BUSY_FRAMES``) unanswered already;
the requests keep their order across chunks, every answer reaches its own waiter whatever order the
answers come in, a connection lost after some answers fails exactly the unanswered requests, and a read
writes the requests held for the turn's end before it hands out its answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
from collections.abc import AsyncIterator

import uvloop

from sparkmq.errors import RemoteError
from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode
from sparkmq.remoting import RemotingClient, client_connection
from sparkmq.remoting.client_connection import LEAN_BUSY_FRAMES, LEAN_CHUNK_FRAMES, ClientConnection
from sparkmq.remoting.connection import COALESCE_MAX_BYTES
from support.chunk_peer import ChunkWatchingPeer, answer

WAIT_S = 30.0  # a bound for a wait that must end at once: only a broken build reaches it


def send(connection: ClientConnection) -> tuple[int, asyncio.Future[object]]:
    opaque = connection.next_opaque()
    frame = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque, ext_fields={"b": "T"}, body=b"x").encode()
    return opaque, connection.request_lean(opaque, RequestCode.SEND_MESSAGE_V2, frame, 30.0)


def offset_of(result: object) -> int:
    """The queueOffset of an answer (a LeanResponse)."""
    return int(result.ext_fields["queueOffset"])  # type: ignore[attr-defined]


def test_a_chunk_is_on_the_wire_before_the_loop_turn_ends_unless_the_peer_has_work() -> None:
    """The peer reads a whole chunk while the client's turn is still running (it never yields meanwhile);
    the next chunk's worth waits for the turn's end, as the peer has a chunk unanswered."""
    count = 1 + LEAN_CHUNK_FRAMES  # the first request (the only one in flight) goes at once, then one chunk
    peer = ChunkWatchingPeer(count)
    requests = peer.requests

    async def main() -> None:
        client = RemotingClient()
        try:
            connection = await client.connection(peer.address)
            assert isinstance(connection, ClientConnection)
            sent = [send(connection) for _ in range(count)]
            # still inside this loop turn: only a write made during the turn can reach the server
            assert peer.got_chunk.wait(WAIT_S), "the chunk was not written before the turn ended"
            assert [r.opaque for r in requests] == [opaque for opaque, _ in sent]
            assert count >= LEAN_BUSY_FRAMES  # the chunk now written makes the server busy
            sent += [send(connection) for _ in range(LEAN_CHUNK_FRAMES)]
            assert len(connection._out) == LEAN_CHUNK_FRAMES  # held for the turn's end: the server has work
            assert [offset_of(await future) for _, future in sent] == [opaque for opaque, _ in sent]
            assert [r.opaque for r in requests] == [opaque for opaque, _ in sent]
        finally:
            await client.close()

    try:
        asyncio.run(main())
    finally:
        peer.close(WAIT_S)


@contextlib.asynccontextmanager
async def _connected_to(script) -> AsyncIterator[ClientConnection]:  # type: ignore[no-untyped-def]
    """A client's connection to a loopback server running ``script``; both closed on exit."""
    server = await asyncio.start_server(script, "127.0.0.1", 0)
    client = RemotingClient()
    try:
        connection = await client.connection(f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        assert isinstance(connection, ClientConnection)
        yield connection
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


def test_chunked_requests_keep_their_order_and_every_answer_finds_its_waiter() -> None:
    count = 4 * LEAN_CHUNK_FRAMES + 17  # several chunks and a tail, all sent in one loop turn
    received: list[RemotingCommand] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while len(received) < count and (data := await reader.read(65536)):
            received.extend(decoder.feed(data))
        shuffled = list(received)
        random.Random(7).shuffle(shuffled)  # answers in any order
        writer.write(b"".join(answer(r) for r in shuffled))
        await writer.drain()
        await reader.read()
        writer.close()

    async def main() -> None:
        async with _connected_to(script) as connection:
            sent = [send(connection) for _ in range(count)]
            results = [await future for _, future in sent]
            assert [r.opaque for r in received] == [opaque for opaque, _ in sent]  # the order they were sent
            assert [offset_of(result) for result in results] == [opaque for opaque, _ in sent]

    asyncio.run(main())


def test_a_connection_lost_between_chunks_fails_exactly_the_unanswered_requests() -> None:
    count, answered = 100, 10  # 1 at once, a chunk of LEAN_CHUNK_FRAMES, then the turn's tail

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder, requests = FrameDecoder(), []
        while len(requests) < 1 + LEAN_CHUNK_FRAMES and (data := await reader.read(65536)):
            requests.extend(decoder.feed(data))
        writer.write(b"".join(answer(r) for r in requests[:answered]))
        await writer.drain()
        writer.transport.abort()  # gone, whatever else was sent or is still arriving

    async def main() -> None:
        async with _connected_to(script) as connection:
            sent = [send(connection) for _ in range(count)]
            outcomes = await asyncio.gather(*(future for _, future in sent), return_exceptions=True)
            assert [offset_of(o) for o in outcomes[:answered]] == [opaque for opaque, _ in sent[:answered]]
            failed = outcomes[answered:]
            assert all(isinstance(o, RemoteError) and o.retriable for o in failed), failed
            await connection.wait_closed()
            assert not connection.is_open

    asyncio.run(main())


def test_lean_sends_to_a_peer_that_stops_reading_go_out_at_once_and_resume_when_it_reads() -> None:
    """While the transport has paused writing (the peer does not read), every lean send is handed to the
    transport at once, so its buffer shows the back-pressure; once the peer reads, sends coalesce again."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    may_read, requests = threading.Event(), []

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:
            may_read.wait(WAIT_S)
            decoder = FrameDecoder()
            while data := peer.recv(65536):  # answer everything, until the client closes
                new = decoder.feed(data)
                requests.extend(new)
                peer.sendall(b"".join(answer(r) for r in new))

    server = threading.Thread(target=serve, daemon=True)
    server.start()

    def big(connection: ClientConnection) -> asyncio.Future[object]:
        opaque = connection.next_opaque()
        frame = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque, body=b"x" * 60_000).encode()
        return connection.request_lean(opaque, RequestCode.SEND_MESSAGE_V2, frame, 30.0)

    async def main() -> None:
        client = RemotingClient()
        try:
            connection = await client.connection(f"127.0.0.1:{listener.getsockname()[1]}")
            assert isinstance(connection, ClientConnection)
            sent = []
            while not connection.writes_paused:  # the peer's and our socket buffers fill, the transport pauses
                sent.append(big(connection))
                await asyncio.sleep(0)
            assert connection._out_limit == 0  # send_lean holds nothing back while paused
            before = connection.write_buffer_bytes
            sent += [send(connection)[1] for _ in range(3)]
            assert connection._out == [] and connection.write_buffer_bytes > before  # not held for the turn
            may_read.set()
            assert all(type(result) in client_connection.LEAN_ANSWERS for result in await asyncio.gather(*sent))
            assert not connection.writes_paused and connection._out_limit == COALESCE_MAX_BYTES
            last = [send(connection) for _ in range(3)]
            assert len(connection._out) == 2  # the first went alone (nothing in flight), the rest wait for the turn
            assert [offset_of(await future) for _, future in last] == [opaque for opaque, _ in last]
            assert [r.opaque for r in requests[-3:]] == [opaque for opaque, _ in last]
        finally:
            await client.close()

    try:
        asyncio.run(main())
    finally:
        may_read.set()
        listener.close()
        server.join(WAIT_S)


class _Watching:
    """A lean waiter that notes how many frames its connection still held for the turn's end when answered."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.answered = connection.create_future()

    def done(self) -> bool:
        return self.answered.done()

    def set_result(self, result: object) -> None:
        self.answered.set_result(len(self.connection._out))

    def set_exception(self, exception: BaseException) -> None:
        self.answered.set_exception(exception)


def test_a_read_writes_the_requests_held_for_the_turn_before_it_hands_out_answers() -> None:
    """Under uvloop a read that comes before the turn's coalesced write still sends that write first: the
    peer gets the new requests before the client spends its time on the answers to the old ones."""
    listener = socket.create_server(("127.0.0.1", 0))
    answered, requests = threading.Event(), []

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:
            decoder = FrameDecoder()
            while data := peer.recv(65536):  # answer each read at once, until the client closes
                new = decoder.feed(data)
                requests.extend(new)
                peer.sendall(b"".join(answer(r) for r in new))
                answered.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()

    async def main() -> None:
        client = RemotingClient()
        try:
            connection = await client.connection(f"127.0.0.1:{listener.getsockname()[1]}")
            assert isinstance(connection, ClientConnection)
            first = _Watching(connection)
            opaque = connection.next_opaque()
            frame = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque, body=b"x").encode()
            connection.send_lean(opaque, RequestCode.SEND_MESSAGE_V2, frame, first, 30.0)  # alone: written now
            assert answered.wait(WAIT_S)  # this turn goes on: its answer waits in the socket
            held = [send(connection) for _ in range(3)]
            assert len(connection._out) == 3  # for the turn's end, which uvloop runs after its next read
            assert await asyncio.wait_for(first.answered, WAIT_S) == 0
            assert [offset_of(await future) for _, future in held] == [opaque for opaque, _ in held]
        finally:
            await client.close()

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
    finally:
        listener.close()
        server.join(WAIT_S)
