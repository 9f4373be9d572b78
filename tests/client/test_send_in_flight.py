"""Sends in flight on the producer's one send path (``SendCall`` + ``ClientConnection.send_lean``).

The route comes from a real NameServer and broker; where a test needs to script the broker's side,
the lane's connection is swapped for one to a scripted server over a real socket. Frames must be the
template's bytes, chunked as ``send_lean`` chunks them, and every answer, timeout, cancel and lost
connection must reach the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import sys
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from json.encoder import encode_basestring
from typing import Any, cast

import pytest

from sparkmq.client import AsyncProducer, Message, SendResult, SendStatus
from sparkmq.client.send_call import SendCall
from sparkmq.errors import RemoteError
from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode
from sparkmq.protocol.frame import decode_frame
from sparkmq.remoting.client_connection import LEAN_CHUNK_FRAMES, ClientConnection
from support.chunk_peer import ChunkWatchingPeer, answer
from support.unconfirming_broker import UnconfirmingCluster

WAIT_S = 30.0  # a bound for a wait that must end at once: only a broken build reaches it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnconfirmingCluster]:
    with UnconfirmingCluster.start(tmp_path_factory.mktemp("sender")) as running:
        yield running


@contextlib.asynccontextmanager
async def _scripted(
    cluster: UnconfirmingCluster,
    topic: str,
    script: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    **options: Any,
) -> AsyncIterator[tuple[AsyncProducer, ClientConnection]]:
    """A started producer whose lane for ``topic`` (one queue) sends to a server running ``script``."""
    server = await asyncio.start_server(script, "127.0.0.1", 0)
    producer = AsyncProducer("PID_lean_sender", cluster.ns, **options)
    await producer.start()
    try:
        await producer.send(Message(topic, b"warm-up"))  # the route, lane and a connection: later sends are lean
        lane = producer._lanes[topic]
        (broker_name,) = lane.connections
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        connection = cast(ClientConnection, await producer.instance.remoting.connection(address))
        lane.connections[broker_name] = connection
        yield producer, connection
    finally:
        await producer.close()
        server.close()
        await server.wait_closed()


def _expected_frame(producer: AsyncProducer, message: Message, request: bytes) -> bytes:
    """The template's frame of ``message`` with the id, opaque, queue and born time ``request`` carries."""
    command = decode_frame(request)
    fields = cast(dict[str, str], command.ext_fields)
    unique_id = fields["i"].rsplit("\x01", 1)[-1]  # ...UNIQ_KEY\x01<id>, the last property
    template = producer._lanes[message.topic].template
    return template.frame(
        RequestCode.SEND_MESSAGE_V2,
        int(fields["e"]),
        command.opaque,
        int(fields["g"]),
        encode_basestring(message.properties_text(unique_id)),
        message.body,
        0,
        message.flag,
    )


@pytest.mark.parametrize("style", ["send", "send_async"])
def test_a_connection_lost_after_some_answers_fails_exactly_the_unanswered_sends(
    cluster: UnconfirmingCluster, style: str
) -> None:
    """100 sends in one loop turn (1 at once, a chunk, the tail): the server answers 10 and drops the
    connection; those 10 return their results, the other 90 fail with a retriable RemoteError (no retries
    left), and every frame the server read is the template's bytes."""
    topic = cluster.topic(f"SenderLost{style}", queues=1)
    count, answered = 100, 10
    received: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder, requests = FrameDecoder(), []
        while len(requests) < 1 + LEAN_CHUNK_FRAMES and (data := await reader.read(65536)):
            requests.extend(decoder.feed(data))
            received.append(data)
        writer.write(b"".join(answer(r) for r in requests[:answered]))
        await writer.drain()
        writer.transport.abort()

    async def main() -> None:
        async with _scripted(cluster, topic, script, retry_times_when_send_failed=0) as (producer, connection):
            messages = [Message(topic, b"m%03d" % i, flag=i) for i in range(count)]
            sends: list[Awaitable[SendResult]] = (
                [producer.send(m) for m in messages] if style == "send" else [producer.send_async(m) for m in messages]
            )
            outcomes = await asyncio.gather(*sends, return_exceptions=True)
            results = cast(list[SendResult], outcomes[:answered])
            assert all(type(r) is SendResult and r.status is SendStatus.SEND_OK for r in results), outcomes[:answered]
            assert [r.queue_offset for r in results] == [int(r.offset_msg_id, 16) for r in results]
            failed = outcomes[answered:]
            assert all(isinstance(o, RemoteError) and o.retriable for o in failed), failed
            assert not connection.is_open and not connection._lean
            frames = [bytes(f) for f in _split(b"".join(received))]
            assert len(frames) >= 1 + LEAN_CHUNK_FRAMES
            for message, frame, result in zip(messages, frames, results + [None] * count, strict=False):
                assert frame == _expected_frame(producer, message, frame)
                if result is not None:
                    assert decode_frame(frame).opaque == result.queue_offset
                    assert result.msg_id in frame.decode("latin-1")

    asyncio.run(main())


def _split(data: bytes) -> Iterator[bytes]:
    position = 0
    while position + 4 <= len(data):
        end = position + 4 + int.from_bytes(data[position : position + 4], "big")
        yield data[position:end]
        position = end


def test_a_chunk_leaves_before_the_turn_ends_and_the_rest_waits_for_it(cluster: UnconfirmingCluster) -> None:
    """send_lean's chunk rule: in one turn that never yields, the first send goes at once and
    the next LEAN_CHUNK_FRAMES in one write the server reads meanwhile; the next chunk's worth waits for the
    turn's end, the server having a chunk unanswered; then every send returns its own answer."""
    topic = cluster.topic("SenderChunk", queues=1)
    count = 1 + LEAN_CHUNK_FRAMES
    peer = ChunkWatchingPeer(count)
    requests = peer.requests

    async def main() -> None:
        producer = AsyncProducer("PID_lean_chunk", cluster.ns)
        await producer.start()
        try:
            await producer.send(Message(topic, b"warm-up"))
            lane = producer._lanes[topic]
            (broker_name,) = lane.connections
            connection = cast(ClientConnection, await producer.instance.remoting.connection(peer.address))
            lane.connections[broker_name] = connection
            sent = [producer.send_async(Message(topic, b"x")) for _ in range(count)]
            assert peer.got_chunk.wait(WAIT_S)  # still inside this turn: written during it
            assert connection._out == []
            sent += [producer.send_async(Message(topic, b"y")) for _ in range(LEAN_CHUNK_FRAMES)]
            assert len(connection._out) == LEAN_CHUNK_FRAMES  # held for the turn's end: the server has work
            results = await asyncio.gather(*sent)
            # the requests in the order sent, each answer to its own send
            assert [r.opaque for r in requests] == [r.queue_offset for r in results]
            assert all(
                r.msg_id in cast(dict[str, str], q.ext_fields)["i"] for r, q in zip(results, requests, strict=True)
            )
        finally:
            await producer.close()
            peer.close()

    asyncio.run(main())


def test_every_queue_id_of_a_wide_topic_is_rendered_in_its_frame(cluster: UnconfirmingCluster) -> None:
    """Every queue of a 1,024-queue topic (the most a topic holds; ids of one to four digits): each frame
    names its queue and decodes as ``RemotingCommand`` reads it; sends go round robin."""
    wide = cluster.topic("SenderWide", queues=1_024)

    async def main() -> None:
        async with AsyncProducer("PID_sender_wide", cluster.ns) as producer:
            await producer.send(Message(wide, b"warm-up"))
            lane = producer._lanes[wide]
            ids = set()
            for queue in lane.queues:
                frame = lane.template.frame(
                    RequestCode.SEND_MESSAGE_V2, queue.queue_id, 9, 1_700_000_000_000, '"p"', b"b", 0, 0
                )
                command = decode_frame(frame)
                assert cast(dict[str, str], command.ext_fields)["e"] == str(queue.queue_id) and command.body == b"b"
                ids.add(queue.queue_id)
            assert ids == set(range(1_024))
            sent = [(await producer.send(Message(wide, b"x"))).queue.queue_id for _ in range(3)]
            assert [(queue_id - sent[0]) % 1_024 for queue_id in sent] == [0, 1, 2]  # round robin

    asyncio.run(main())


def test_sends_leave_nothing_behind(cluster: UnconfirmingCluster) -> None:
    """10,000 sends of each shape, answered over a real socket: no reference to the message or the producer
    is kept, no waiter outlives its answer, and the client's traced memory stays flat (a frame, id, result
    or waiter kept per send would be 50 bytes or more each: over 500 KiB)."""
    topic = cluster.topic("SenderFlat", queues=1)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            writer.write(b"".join(answer(r) for r in decoder.feed(data)))
        writer.close()  # the client closed: so do we

    async def sends(producer: AsyncProducer, message: Message, count: int) -> None:
        for start in range(0, count, 100):
            await asyncio.gather(*(producer.send(message) for _ in range(50)))
            await asyncio.gather(*(producer.send_async(message) for _ in range(50)))
            assert start < count

    async def main() -> None:
        async with _scripted(cluster, topic, script) as (producer, connection):
            message = Message(topic, b"the same message each time")
            await sends(producer, message, 2_000)  # warm-up: tables, queues and allocator at their size
            gc.collect()
            references = sys.getrefcount(message), sys.getrefcount(producer)
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                await sends(producer, message, 20_000)
                gc.collect()
                grown = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            assert (sys.getrefcount(message), sys.getrefcount(producer)) == references
            assert not connection._lean
            assert not any(type(o) is SendCall for o in gc.get_objects())
            assert grown < 256 * 1024, grown

    asyncio.run(main())


@pytest.mark.parametrize("style", ["send", "send_async"])
def test_the_sweeper_fails_exactly_the_unanswered_sends_and_a_cancelled_send_forgets_its_opaque(
    cluster: UnconfirmingCluster, style: str
) -> None:
    """30 sends in flight on a server that answers every third: 10 return their results; of the others, 5
    are cancelled by their caller (CancelledError, their opaques forgotten at once, their answers never
    delivered) and 15 fail with the sweeper's retriable timeout. Afterwards the table and the deadline
    groups are empty."""
    topic = cluster.topic(f"SenderSweep{style}", queues=1)
    count = 30
    read_all = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder, requests = FrameDecoder(), []
        while len(requests) < count and (data := await reader.read(65536)):
            requests.extend(decoder.feed(data))
        writer.write(b"".join(answer(r) for r in requests[::3]))
        await writer.drain()
        read_all.set()
        while await reader.read(65536):
            pass
        writer.close()  # the client closed: so do we

    async def main() -> None:
        async with _scripted(cluster, topic, script, retry_times_when_send_failed=0, send_timeout_s=0.5) as (
            producer,
            connection,
        ):
            messages = [Message(topic, b"s%03d" % i) for i in range(count)]
            sends = [
                asyncio.ensure_future(producer.send(m) if style == "send" else producer.send_async(m)) for m in messages
            ]
            await asyncio.wait_for(read_all.wait(), WAIT_S)
            while len(connection._lean) > count - count // 3:
                await asyncio.sleep(0)  # the answers' read
            cancelled = [i for i in range(count) if i % 3 == 1][:5]
            for i in cancelled:
                sends[i].cancel()
            outcomes = await asyncio.gather(*sends, return_exceptions=True)
            for i, outcome in enumerate(outcomes):
                if i % 3 == 0:
                    assert type(outcome) is SendResult and outcome.status is SendStatus.SEND_OK, (i, outcome)
                elif i in cancelled:
                    assert isinstance(outcome, asyncio.CancelledError), (i, outcome)
                else:
                    assert isinstance(outcome, RemoteError) and outcome.retriable, (i, outcome)
                    assert "timed out after 0.5 s" in str(outcome)
            assert not connection._lean
            connection._sweep()  # what is left of the deadline groups: answered or forgotten, popped by a sweep
            assert connection._lean_groups and not any(connection._lean_groups.values())

    asyncio.run(main())


def test_deadline_groups_never_fail_a_request_before_its_own_deadline(cluster: UnconfirmingCluster) -> None:
    """Requests of two timeouts and two codes, each in three bursts spread over more than a group's slack, to a
    server that never answers: each fails with its own code and timeout, none before its own deadline (a
    later member of a group is not failed at the group's first deadline), and no group is left."""
    topic = cluster.topic("SenderGroups", queues=1)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass
        writer.close()

    async def main() -> None:
        async with _scripted(cluster, topic, silent) as (_, connection):
            loop = asyncio.get_running_loop()
            sent: list[tuple[asyncio.Future[Any], float, float, int]] = []
            for timeout, codes in ((0.3, (310, 310, 310)), (0.45, (320, 321, 320))):
                for code in codes:  # a burst; the next one a little later, the third past the first's group slack
                    for _ in range(4):
                        opaque = connection.next_opaque()
                        frame = RemotingCommand.request(code, opaque).encode()
                        future = connection.request_lean(opaque, code, frame, timeout)
                        sent.append((future, loop.time(), timeout, code))
                    await asyncio.sleep(0.06)
            failed_at: dict[int, float] = {}
            for i, (future, *_) in enumerate(sent):
                future.add_done_callback(lambda _, i=i: failed_at.__setitem__(i, loop.time()))
            await asyncio.wait([future for future, *_ in sent], timeout=WAIT_S)
            for i, (future, at, timeout, code) in enumerate(sent):
                error = future.exception()
                assert isinstance(error, RemoteError) and error.retriable, (i, error)
                assert f"request code {code} " in str(error) and f"timed out after {timeout} s" in str(error)
                assert failed_at[i] >= at + timeout, (i, failed_at[i] - at, timeout)
            connection._sweep()
            assert not connection._lean and not any(connection._lean_groups.values())

    asyncio.run(main())


# ---- answers of one read, and send()'s coroutine ------------------------------------------------------------
BURST = 40
CALLER: contextvars.ContextVar[int] = contextvars.ContextVar("caller")


def _burst_server(count: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
    """A server that reads ``count`` requests, then answers them all in one write (one read for the client)."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder, requests = FrameDecoder(), []
        while len(requests) < count and (data := await reader.read(65536)):
            requests.extend(decoder.feed(data))
        writer.write(b"".join(answer(r) for r in requests))
        await writer.drain()
        while await reader.read(65536):
            pass
        writer.close()  # the client closed: so do we

    return script


def test_a_burst_of_answers_wakes_every_task_in_its_own_context_in_answer_order(cluster: UnconfirmingCluster) -> None:
    """40 Tasks, each with its own value of a ContextVar, await a send; the server answers all 40 in one
    write. Every Task gets its own SendResult (msgId naming its request), still sees its own context value,
    and they resume in the order of the answers."""
    topic = cluster.topic("WakeupsContext", queues=1)
    resumed: list[int] = []

    async def main() -> None:
        async with _scripted(cluster, topic, _burst_server(BURST)) as (producer, connection):

            async def one(i: int) -> tuple[int, SendResult]:
                CALLER.set(i)
                result = await producer.send(Message(topic, b"w%03d" % i))
                resumed.append(CALLER.get())
                return CALLER.get(), result

            outcomes = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(BURST))), WAIT_S)
            assert [seen for seen, _ in outcomes] == list(range(BURST))
            opaques = [int(result.msg_id, 16) for _, result in outcomes]
            assert all(r.status is SendStatus.SEND_OK for _, r in outcomes) and len(set(opaques)) == BURST
            assert resumed == sorted(resumed, key=lambda i: opaques[i])  # answers come in request order
            assert not connection._lean

    asyncio.run(main())


def test_a_raising_callback_is_reported_and_the_callbacks_after_it_still_run(
    cluster: UnconfirmingCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Three ``send_async`` answered in one read: the first's callback raises, the others record. The error
    is logged with its traceback, the later callbacks run, and every future has its result."""
    topic = cluster.topic("WakeupsRaise", queues=1)
    called: list[str] = []

    def boom(_future: Any) -> None:
        called.append("boom")
        raise ValueError("callback failed")

    async def main() -> list[SendResult]:
        async with _scripted(cluster, topic, _burst_server(3)) as (producer, _connection):
            futures = [
                producer.send_async(Message(topic, b"first"), boom),
                producer.send_async(Message(topic, b"second"), lambda _f: called.append("second")),
                producer.send_async(Message(topic, b"third"), lambda _f: called.append("third")),
            ]
            return list(await asyncio.wait_for(asyncio.gather(*futures), WAIT_S))

    with caplog.at_level(logging.ERROR, logger="sparkmq.client.producer"):
        results = asyncio.run(main())
    assert called == ["boom", "second", "third"]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert any("send callback" in r.getMessage() and r.exc_info for r in caplog.records)


def _answering(requests: list[Any]) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
    """A server that answers each request as it reads it (SUCCESS), recording them in ``requests``."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            read = decoder.feed(data)
            requests.extend(read)
            writer.write(b"".join(answer(r) for r in read))
        writer.close()  # the client closed: so do we

    return script


def test_send_is_a_lazy_coroutine_that_await_a_task_gather_and_wait_for_drive(cluster: UnconfirmingCluster) -> None:
    """``send`` returns a coroutine (``asyncio.iscoroutine``) that sends nothing before its first step, and
    gives the same SEND_OK awaited, as a Task, through gather and through wait_for; awaiting it twice is the
    RuntimeError of a coroutine; one closed unstarted sends nothing, one dropped unstarted sends nothing and
    warns that it was never awaited."""
    topic = cluster.topic("SendCoroutine", queues=1)
    requests: list[Any] = []

    async def main() -> None:
        async with _scripted(cluster, topic, _answering(requests)) as (producer, connection):
            lazy = producer.send(Message(topic, b"lazy"))
            assert asyncio.iscoroutine(lazy)
            never = producer.send(Message(topic, b"never"))
            never.close()
            with pytest.warns(RuntimeWarning, match="was never awaited"):
                dropped = producer.send(Message(topic, b"dropped"))
                del dropped
                gc.collect()
            for _ in range(3):
                await asyncio.sleep(0)
            assert not connection._lean and not requests  # nothing sent before a first step
            results = [await lazy]
            results.append(await asyncio.create_task(producer.send(Message(topic, b"task"))))
            results.extend(await asyncio.gather(*(producer.send(Message(topic, b"g%d" % i)) for i in range(5))))
            results.append(await asyncio.wait_for(producer.send(Message(topic, b"wait_for")), WAIT_S))
            assert all(type(r) is SendResult and r.status is SendStatus.SEND_OK for r in results)
            bodies = [r.body for r in requests]
            assert sorted(bodies) == sorted([b"lazy", b"task", b"wait_for", *(b"g%d" % i for i in range(5))])
            with pytest.raises(RuntimeError, match="cannot reuse already awaited coroutine"):
                await lazy
            assert not connection._lean

    asyncio.run(main())


def test_a_send_closed_cancelled_or_thrown_into_in_flight_forgets_its_request(cluster: UnconfirmingCluster) -> None:
    """Sends in flight to a server that never answers: a send's coroutine closed at its await, a Task of one
    cancelled, and one an exception is thrown into each forget their request (their opaques leave the
    connection's table at once) and end as a coroutine does (None; CancelledError; the exception)."""
    topic = cluster.topic("SendCoroutineForget", queues=1)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass
        writer.close()  # the client closed: so do we

    async def main() -> None:
        async with _scripted(cluster, topic, silent) as (producer, connection):
            closed = producer.send(Message(topic, b"closed"))
            closed.send(None)
            assert len(connection._lean) == 1
            closed.close()
            assert not connection._lean

            task = asyncio.create_task(producer.send(Message(topic, b"cancelled")))
            while not connection._lean:
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not connection._lean

            thrown = producer.send(Message(topic, b"thrown"))
            thrown.send(None)
            assert len(connection._lean) == 1
            with pytest.raises(ValueError, match="stop"):
                thrown.throw(ValueError("stop"))
            assert not connection._lean

    asyncio.run(main())
