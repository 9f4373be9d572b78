"""The producer's whole lean send in one C call (``client_lane.c``'s ``Sender``) against its Python reference.

Each test runs with the C ``Sender`` and with the Python path (``AsyncProducer._lean_send`` +
``ClientConnection.send_lean`` + ``CallbackSend``); the route comes from a real NameServer and broker, and
where a test needs to script the broker's side the lane's connection is swapped for one to a scripted
server over a real socket. Frames must be byte-identical, chunked as the Python path chunks them, and
every answer, timeout and lost connection must reach the caller as it does without the C lane.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import gc
import sys
import threading
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkmq.client import AsyncProducer, Message, SendResult, SendStatus
from sparkmq.errors import RemoteError
from sparkmq.protocol import FrameDecoder
from sparkmq.protocol.frame import decode_frame
from sparkmq.remoting import client_native
from sparkmq.remoting.client_connection import LEAN_CHUNK_FRAMES, ClientConnection
from support.chunk_peer import ChunkWatchingPeer, answer
from support.unconfirming_broker import UnconfirmingCluster

WAIT_S = 30.0  # a bound for a wait that must end at once: only a broken build reaches it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnconfirmingCluster]:
    with UnconfirmingCluster.start(tmp_path_factory.mktemp("sender")) as running:
        yield running


@pytest.fixture(params=["c-sender", "python"])
def sender(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Producers made in the test take the C Sender (True) or the Python reference (False)."""
    if request.param == "python":
        monkeypatch.setattr(client_native, "Sender", None)
        return False
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    return True


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
    """The Python reference's frame of ``message`` with the id, opaque, queue and born time ``request`` carries."""
    command = decode_frame(request)
    fields = cast(dict[str, str], command.ext_fields)
    unique_id = fields["i"].rsplit("\x01", 1)[-1]  # ...UNIQ_KEY\x01<id>, the last property
    template = producer._lanes[message.topic].template
    return template.frame_python(
        int(fields["e"]),
        command.opaque,
        int(fields["g"]),
        message.properties_text(unique_id),
        message.body,
        0,
        message.flag,
    )


@pytest.mark.parametrize("style", ["send", "send_async"])
def test_a_connection_lost_after_some_answers_fails_exactly_the_unanswered_sends(
    cluster: UnconfirmingCluster, sender: bool, style: str
) -> None:
    """100 sends in one loop turn (1 at once, a chunk, the tail): the server answers 10 and drops the
    connection; those 10 return their results, the other 90 fail with a retriable RemoteError (no retries
    left), and every frame the server read is the Python reference's bytes."""
    topic = cluster.topic(f"SenderLost{style}{sender}", queues=1)
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
            if style == "send_async" and sender:
                assert all(type(w) is client_native._clientlane.Waiter for w in connection._lean.values())
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


def test_a_chunk_leaves_before_the_turn_ends_and_the_rest_waits_for_it(
    cluster: UnconfirmingCluster, sender: bool
) -> None:
    """The C Sender's chunk rule is send_lean's: in one turn that never yields, the first send goes at once and
    the next LEAN_CHUNK_FRAMES in one write the server reads meanwhile; the next chunk's worth waits for the
    turn's end, the server having a chunk unanswered; then every send returns its own answer."""
    topic = cluster.topic(f"SenderChunk{sender}", queues=1)
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


@dataclasses.dataclass
class _Twin:
    """A producer's lean state, read back after a prepare: the queue counter's and the connection's next numbers."""

    counter: int
    opaque: int


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.binary(max_size=5000) | st.text(max_size=40),
    flag=st.integers(min_value=-(2**40), max_value=2**40) | st.just(2**70),
    wait=st.booleans(),
    tags=st.none() | st.just("t"),
    delay=st.sampled_from([0, -1, 2]),
    properties=st.sampled_from([{}, {"k": "v"}]),
)
def test_the_c_sender_prepares_what_the_python_lean_path_does_or_leaves_it_to_it(
    sender_producer: tuple[AsyncProducer, str],
    body: bytes | str,
    flag: int,
    wait: bool,
    tags: str | None,
    delay: int,
    properties: dict[str, str],
) -> None:
    """For any message: the Sender's prepare (nothing sent) is the Python reference's frame, id, queue and
    opaque, moving the producer's queue counter and the connection's opaques by one each, as _lean_send
    does; or None, touching nothing, for what it leaves to that path (not plain, a str or compressed body,
    a flag over int64)."""
    producer, topic = sender_producer
    message = Message(topic, body, tags=tags, delay_level=delay, properties=properties, flag=flag, wait_store_ok=wait)
    connection = next(iter(producer._lanes[topic].connections.values()))
    before = _peek(producer, connection)
    made = producer._sender.prepare(message)
    plain = not (tags or delay > 0 or properties)
    if not plain or type(body) is not bytes or len(body) >= 4096 or not -(2**63) <= flag < 2**63:
        assert made is None
        assert _peek(producer, connection) == _Twin(before.counter + 1, before.opaque + 1)  # only _peek's own
        return
    unique_id, frame, queue, made_on, opaque = made
    assert made_on is connection and opaque == before.opaque + 1
    assert queue is producer._lanes[topic].queues[(before.counter + 1) % len(producer._lanes[topic].queues)]
    assert _peek(producer, connection) == _Twin(before.counter + 2, before.opaque + 2)
    born_ms = int(cast(dict[str, str], decode_frame(frame).ext_fields)["g"])
    template = producer._lanes[topic].template
    assert frame == template.frame_python(
        queue.queue_id, opaque, born_ms, message.properties_text(unique_id), body, 0, flag
    )
    ids = producer._ids
    assert unique_id[:28] == f"{ids._prefix}{(born_ms - ids._month_start_ms) & 0xFFFFFFFF:08X}"


@pytest.mark.parametrize("head", [True, False], ids=["middle-head", "middles-dict"])
def test_the_c_sender_renders_every_queue_id_of_a_wide_topic(cluster: UnconfirmingCluster, head: bool) -> None:
    """Every queue of a 1,024-queue topic (the most a topic holds; ids of one to four digits): the Sender's
    frame is the Python reference's, whether it writes the id's digits after the template's ``middle_head``
    or (a template without one) reads the template's middle of each queue id."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    wide = cluster.topic(f"SenderWide{head}", queues=1_024)
    other = cluster.topic(f"SenderWideOther{head}", queues=1)
    with _threaded_producer(cluster, f"PID_sender_wide_{head}", [wide, other]) as producer:
        lane = producer._lanes[wide]
        if not head:  # read anew when the Sender comes back to this lane from another
            lane.template.middle_head = None  # type: ignore[assignment]
            assert producer._sender.prepare(Message(other, b"x")) is not None
        ids = set()
        for _ in range(len(lane.queues)):
            unique_id, frame, queue, _, opaque = producer._sender.prepare(Message(wide, b"body"))
            born_ms = int(cast(dict[str, str], decode_frame(frame).ext_fields)["g"])
            properties = Message(wide, b"body").properties_text(unique_id)
            assert frame == lane.template.frame_python(queue.queue_id, opaque, born_ms, properties, b"body", 0, 0)
            ids.add(queue.queue_id)
        assert ids == set(range(1_024))
        assert (lane.template.middle_head is not None) == head


@contextlib.contextmanager
def _threaded_producer(cluster: UnconfirmingCluster, group: str, topics: list[str]) -> Iterator[AsyncProducer]:
    """A started producer with a lane on each of ``topics`` (one send each), on a loop of its own thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(WAIT_S)

    async def make() -> AsyncProducer:
        producer = AsyncProducer(group, cluster.ns)
        await producer.start()
        for topic in topics:
            await producer.send(Message(topic, b"warm-up"))
        return producer

    producer = run(make())
    try:
        yield producer
    finally:
        run(producer.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()


def _peek(producer: AsyncProducer, connection: ClientConnection) -> _Twin:
    """The next values of the producer's queue counter and the connection's opaques (each taken: +1)."""
    counter = next(producer._counter)
    opaque = connection.next_opaque()
    return _Twin(counter, opaque)


@pytest.fixture(scope="module")
def sender_producer(cluster: UnconfirmingCluster) -> Iterator[tuple[AsyncProducer, str]]:
    """A started producer with the C Sender and a lane on a two-queue topic, on a loop of its own thread."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    topic = cluster.topic("SenderPrepare", queues=2)
    with _threaded_producer(cluster, "PID_sender_prepare", [topic]) as producer:
        yield producer, topic


def test_sends_through_the_sender_leave_nothing_behind(cluster: UnconfirmingCluster, sender: bool) -> None:
    """10,000 sends of each shape, answered over a real socket: no reference to the message or the producer
    is kept, no waiter outlives its answer, and the client's traced memory stays flat (a frame, id, result
    or waiter kept per send would be 50 bytes or more each: over 500 KiB)."""
    topic = cluster.topic(f"SenderFlat{sender}", queues=1)

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
            waiter_type = getattr(client_native._clientlane, "Waiter", None) if sender else None
            assert waiter_type is None or not any(type(o) is waiter_type for o in gc.get_objects())
            assert grown < 256 * 1024, grown

    asyncio.run(main())


@pytest.mark.parametrize("style", ["send", "send_async"])
def test_the_sweeper_fails_exactly_the_unanswered_sends_and_a_cancelled_send_forgets_its_opaque(
    cluster: UnconfirmingCluster, sender: bool, style: str
) -> None:
    """30 sends in flight on a server that answers every third: 10 return their results; of the others, 5
    are cancelled by their caller (CancelledError, their opaques forgotten at once, their answers never
    delivered) and 15 fail with the sweeper's retriable timeout. Afterwards the table and the deadline
    queues (two deques in step, no tuple per send) are empty."""
    topic = cluster.topic(f"SenderSweep{style}{sender}", queues=1)
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
            connection._sweep()  # what is left of the queues: answered or forgotten, popped by a sweep
            queues = [queue for by_code in connection._lean_deadlines.values() for queue in by_code.values()]
            assert queues and all(tuple(map(len, queue)) == (0, 0) for queue in queues)

    asyncio.run(main())


def test_an_awaited_waiter_is_a_future_a_task_can_wait_on_cancel_and_read(cluster: UnconfirmingCluster) -> None:
    """The C Waiter ``send`` awaits is its own asyncio-compatible future (no asyncio Future, no FutureIter per
    send). Driven by hand: pending, it yields itself marked blocking, as ``Future.__await__`` does; answered,
    it returns its SendResult (again on a second await). A cancelled one raises CancelledError with its
    message, ignores the answer that still comes, and calls back what was added before and after it ended; an
    error set on it is raised by its await, as a future's."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    topic = cluster.topic("SenderAwaitable", queues=1)
    released = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            requests = decoder.feed(data)
            await released.wait()
            writer.write(b"".join(answer(r) for r in requests))
        writer.close()  # the client closed: so do we

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with _scripted(cluster, topic, script) as (producer, connection):
            waiter = producer._sender.send(Message(topic, b"by hand"))
            cancelled = producer._sender.send(Message(topic, b"cancelled"))
            assert type(waiter) is client_native._clientlane.Waiter and waiter.future is None
            assert waiter.get_loop() is loop and not waiter.done() and not waiter.cancelled()
            with pytest.raises(asyncio.InvalidStateError):
                waiter.result()
            iterator = waiter.__await__()
            assert iterator is waiter
            assert next(iterator) is waiter and waiter._asyncio_future_blocking
            waiter._asyncio_future_blocking = False
            called: list[Any] = []
            cancelled.add_done_callback(called.append)
            cancelled.add_done_callback(lambda w: called.append("second"), context=None)
            assert cancelled.cancel("no longer wanted") and not cancelled.cancel()
            assert cancelled.done() and cancelled.cancelled()
            released.set()
            result = await waiter
            assert type(result) is SendResult and result.status is SendStatus.SEND_OK and waiter.done()
            with pytest.raises(StopIteration) as stop:
                next(iterator)
            assert stop.value.value is result and await waiter is result and waiter.result() is result
            while connection._lean:
                await asyncio.sleep(0)  # the cancelled send's answer: read, and ignored
            with pytest.raises(asyncio.CancelledError, match="no longer wanted"):
                await cancelled
            late = loop.create_future()
            cancelled.add_done_callback(late.set_result)
            assert await late is cancelled and called == [cancelled, "second"]
            failing = producer._sender.send(Message(topic, b"fails"))
            connection.forget(failing.opaque)
            failing.set_exception(RemoteError("gone", retriable=True))
            failing.set_result(("ignored", 0))  # done already: the first outcome stays
            with pytest.raises(RemoteError, match="gone"):
                await failing

    asyncio.run(main())


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sends=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=40))
def test_c_and_python_lean_sends_share_one_deadline_queue_and_the_sweeper_fails_exactly_the_unanswered(
    cluster: UnconfirmingCluster, sends: list[tuple[bool, bool]]
) -> None:
    """Any mix on one connection of sends the C Sender makes (plain) and sends it leaves to the Python lean
    path (tagged), each answered or not: both append to the same deadline queue (two deques in step), the
    answered ones return their results, the others fail with the sweeper's timeout, and the queue ends empty."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    topic = cluster.topic("SenderMixedQueue", queues=1)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            writer.write(b"".join(answer(r) for r in decoder.feed(data) if (r.body or b"").startswith(b"a")))
        writer.close()  # the client closed: so do we

    async def main() -> None:
        async with _scripted(cluster, topic, script, retry_times_when_send_failed=0, send_timeout_s=0.3) as (
            producer,
            connection,
        ):
            messages = [
                Message(topic, b"%s%03d" % (b"a" if answered else b"n", i), tags=None if plain else "t")
                for i, (plain, answered) in enumerate(sends)
            ]
            tasks = [asyncio.ensure_future(producer.send(m)) for m in messages]
            unanswered = [plain for plain, answered in sends if not answered]
            while len(connection._lean) > len(unanswered):
                await asyncio.sleep(0)  # the answers' read (the sweeper is 0.3 s away)
            waiters = list(connection._lean.values())
            if len(waiters) == len(unanswered):  # none timed out yet: who waits is whose path sent it
                kinds = sorted(type(w) is client_native._clientlane.Waiter for w in waiters)
                assert kinds == sorted(unanswered)
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            for (_, answered), outcome in zip(sends, outcomes, strict=True):
                if answered:
                    assert type(outcome) is SendResult and outcome.status is SendStatus.SEND_OK, outcome
                else:
                    assert isinstance(outcome, RemoteError) and "timed out after 0.3 s" in str(outcome), outcome
            assert not connection._lean
            connection._sweep()
            queues = [queue for by_code in connection._lean_deadlines.values() for queue in by_code.values()]
            assert len(queues) == 1 and tuple(map(len, queues[0])) == (0, 0)

    asyncio.run(main())


# ---- one read's answers wake their Tasks through one loop callback (run_wakeups) ----------------------------
# asyncio gives every done callback of a future a Handle of its own (a Handle and an argument tuple: two
# GC-tracked objects per answer, all made in the read before any Task runs); the C lane's deliver collects
# the wake-ups of the awaited sends a read answers and schedules one callback that runs them in order, each in
# its own context (docs/design-notes.md, "The client's collector").

BURST = 40
CALLER: contextvars.ContextVar[int] = contextvars.ContextVar("caller")


class CountingLoop(asyncio.SelectorEventLoop):  # type: ignore[misc,valid-type]
    """A real selector loop that records what each ``call_soon`` schedules (callback name, first argument)."""

    def __init__(self) -> None:
        super().__init__()
        self.scheduled: list[tuple[str, Any]] = []

    def call_soon(self, callback: Callable[..., Any], *args: Any, context: Any = None) -> asyncio.Handle:
        self.scheduled.append((getattr(callback, "__name__", repr(callback)), args[0] if args else None))
        return super().call_soon(callback, *args, context=context)


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


def _run(main: Callable[[], Any]) -> CountingLoop:
    with asyncio.Runner(loop_factory=CountingLoop) as runner:
        runner.run(main())
        loop = runner.get_loop()
    assert isinstance(loop, CountingLoop)
    return loop


def test_a_burst_of_answers_wakes_every_task_in_its_own_context_in_answer_order(cluster: UnconfirmingCluster) -> None:
    """40 Tasks, each with its own value of a ContextVar, await a send; the server answers all 40 in one
    write. Every Task gets its own SendResult (msgId naming its request) and still sees its own context
    value; they resume in the order of the answers; and the answers did not get a Handle each: the wake-ups
    of a read went through one ``run_wakeups`` callback (a read that answers one send schedules it alone)."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    topic = cluster.topic("WakeupsContext", queues=1)
    resumed: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, CountingLoop)
        async with _scripted(cluster, topic, _burst_server(BURST)) as (producer, connection):

            async def one(i: int) -> tuple[int, SendResult]:
                CALLER.set(i)
                result = await producer.send(Message(topic, b"w%03d" % i))
                resumed.append(CALLER.get())
                return CALLER.get(), result

            loop.scheduled.clear()
            outcomes = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(BURST))), WAIT_S)
            assert [seen for seen, _ in outcomes] == list(range(BURST))
            opaques = [int(result.msg_id, 16) for _, result in outcomes]
            assert all(r.status is SendStatus.SEND_OK for _, r in outcomes) and len(set(opaques)) == BURST
            assert resumed == sorted(resumed, key=lambda i: opaques[i])  # answers come in request order
            waiter_type = client_native._clientlane.Waiter
            lone = [s for s in loop.scheduled if type(s[1]) is waiter_type]  # a read that answered one send
            batches = [s[1] for s in loop.scheduled if s[0] == "run_wakeups"]
            assert sum((len(b) - 1) // 3 for b in batches) + len(lone) == BURST
            assert len(batches) + len(lone) <= BURST // 4  # one Handle per read (one write: one or a few reads)
            assert not connection._lean

    _run(main)


def test_a_raising_callback_is_reported_and_the_wakeups_after_it_still_run(cluster: UnconfirmingCluster) -> None:
    """Two sends answered in one read: the first's done callback raises, the second's records. The loop's
    exception handler gets the error (as it would from that callback's own Handle), and the second
    callback and both Tasks awaiting the sends still run. A callback removed after the answer was read
    (its wake-up already collected) still runs, as asyncio's scheduled Handle would."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    topic = cluster.topic("WakeupsRaise", queues=1)
    reported: list[BaseException | None] = []
    called: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reported.append(context.get("exception")))
        async with _scripted(cluster, topic, _burst_server(4)) as (producer, connection):
            first = producer._sender.send(Message(topic, b"first"))
            second = producer._sender.send(Message(topic, b"second"))

            def boom(_waiter: Any) -> None:
                called.append("boom")
                raise ValueError("callback failed")

            first.add_done_callback(boom)
            second.add_done_callback(lambda _w: called.append("second"))
            third = producer._sender.send(Message(topic, b"third"))

            def record_third(_waiter: Any) -> None:
                called.append("third")

            third.add_done_callback(record_third)
            tasks = [asyncio.ensure_future(producer.send(Message(topic, b"task")))]
            while connection._lean:
                await asyncio.sleep(0)  # the burst's read
            assert first.done() and second.done() and third.done()
            assert (
                third.remove_done_callback(record_third) == 0
            )  # its wake-up was collected: it runs, as a Handle would
            results = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
            while len(called) < 3:
                await asyncio.sleep(0)
            assert called == ["boom", "second", "third"]
            assert len(reported) == 1 and isinstance(reported[0], ValueError)
            assert (await first).status is SendStatus.SEND_OK and (await second).status is SendStatus.SEND_OK
            assert results[0].status is SendStatus.SEND_OK

    _run(main)


class NamingLoop(asyncio.SelectorEventLoop):  # type: ignore[misc,valid-type]
    """A real selector loop that records the name of what each ``call_soon`` schedules (and holds nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def call_soon(self, callback: Callable[..., Any], *args: Any, context: Any = None) -> asyncio.Handle:
        self.names.append(getattr(callback, "__name__", ""))
        return super().call_soon(callback, *args, context=context)


def test_a_burst_lets_each_answered_waiter_go_once_its_task_ran(cluster: UnconfirmingCluster) -> None:
    """40 sends answered in one read: while the burst's wake-ups run, the waiter of a send whose Task already
    resumed is held by nothing of the library's (its wake-up entry is let go as its own Handle would be), so
    a Task that sends again frees its finished send at once instead of when the whole read's wake-ups are
    done (thousands of answers in one read would otherwise keep thousands of finished sends alive beside
    their successors: docs/design-notes.md, "The client's collector")."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    topic = cluster.topic("WakeupsLetGo", queues=1)
    waiters: list[Any] = []
    during: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, NamingLoop)
        async with _scripted(cluster, topic, _burst_server(BURST)) as (producer, connection):

            async def one(i: int) -> SendResult:
                waiter = producer._sender.send(Message(topic, b"g%03d" % i))
                waiters.append(waiter)
                result: SendResult = await waiter
                del waiter
                if i > 0:  # the waiter of the Task that resumed just before this one (answers come in order)
                    during.append(sys.getrefcount(waiters[i - 1]))
                return result

            loop.names.clear()
            results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(BURST))), WAIT_S)
            assert all(r.status is SendStatus.SEND_OK for r in results) and not connection._lean
            assert "run_wakeups" in loop.names  # the answers came in reads of several
            after = [sys.getrefcount(waiters[k]) for k in range(len(during))]  # the burst's lists are gone
            assert len(during) == BURST - 1 and during == after  # nothing more held them while the burst ran

    with asyncio.Runner(loop_factory=NamingLoop) as runner:
        runner.run(main())


# ---- send()'s coroutine: for a plain send with the C lane, client_lane.c's SendCall --------------------------
# An awaited SendCall hands the awaiting frame the request's Waiter and is gone: no Python coroutine of ~480
# bytes in flight beside each send (docs/design-notes.md, "The client's collector"). It must still be a coroutine in
# every way callers use one: lazy, a Task's, gather's and wait_for's, cancellable, closable.


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


def test_send_is_a_lazy_coroutine_that_await_a_task_gather_and_wait_for_drive(
    cluster: UnconfirmingCluster, sender: bool
) -> None:
    """``send`` returns a coroutine (``asyncio.iscoroutine``) that sends nothing before its first step, and
    gives the same SEND_OK awaited, as a Task, through gather and through wait_for; awaiting it twice is the
    RuntimeError of a coroutine; one closed unstarted sends nothing, one dropped unstarted sends nothing and
    warns that it was never awaited."""
    topic = cluster.topic(f"SendCoroutine{sender}", queues=1)
    requests: list[Any] = []

    async def main() -> None:
        async with _scripted(cluster, topic, _answering(requests)) as (producer, connection):
            lazy = producer.send(Message(topic, b"lazy"))
            assert asyncio.iscoroutine(lazy)
            assert (type(lazy) is getattr(client_native._clientlane, "SendCall", None)) is sender
            never = producer.send(Message(topic, b"never"))
            never.close()
            with pytest.warns(RuntimeWarning, match="was never awaited"):
                dropped = producer.send(Message(topic, b"dropped"))
                del dropped
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
            with pytest.raises(RuntimeError, match="already awaited"):
                await lazy
            assert not connection._lean

    asyncio.run(main())


def test_a_send_closed_cancelled_or_thrown_into_in_flight_forgets_its_request(cluster: UnconfirmingCluster) -> None:
    """Sends in flight to a server that never answers: a send's coroutine closed at its await, a Task of one
    cancelled, and one an exception is thrown into each forget their request (their opaques leave the
    connection's table at once) and end as a coroutine does (None; CancelledError; the exception)."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    topic = cluster.topic("SendCoroutineForget", queues=1)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):
            pass
        writer.close()  # the client closed: so do we

    async def main() -> None:
        async with _scripted(cluster, topic, silent) as (producer, connection):
            closed = producer.send(Message(topic, b"closed"))
            waiter = closed.send(None)
            assert type(waiter) is client_native._clientlane.Waiter and list(connection._lean) == [waiter.opaque]
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
            with pytest.raises(ValueError, match="stop"):
                thrown.throw(ValueError("stop"))
            assert not connection._lean

            # a retriable error thrown in retries (the Python steps, awaiting their next step); what is thrown
            # into that retry ends it as it ends a coroutine's await
            retried = producer.send(Message(topic, b"retried"))
            first = retried.send(None)
            retry = retried.throw(RemoteError("injected", retriable=True))
            assert isinstance(retry, asyncio.Future) and not retry.done()
            with pytest.raises(ValueError, match="during the retry"):
                retried.throw(ValueError("during the retry"))
            # the first attempt's request stays until its timeout, as with the Python steps: a RemoteError
            # normally comes from the request itself, which has left the table by then
            assert list(connection._lean) == [first.opaque]
            connection.forget(first.opaque)

    asyncio.run(main())


def test_sends_awaited_in_flight_hold_no_coroutine_of_the_library(cluster: UnconfirmingCluster) -> None:
    """40 Tasks each awaiting a plain send the server answers only once all 40 arrived: while they wait, no
    coroutine of the producer's (nor a SendCall) is alive, only the 40 Waiters the connection's table holds."""
    if client_native.Sender is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    topic = cluster.topic("SendCoroutineNone", queues=1)

    def library_coroutines() -> list[Any]:
        return [
            o
            for o in gc.get_objects()
            if type(o) is client_native._clientlane.SendCall
            or (
                asyncio.iscoroutine(o)
                and getattr(o, "cr_code", None) is not None
                and "producer" in o.cr_code.co_filename
            )
        ]

    async def main() -> None:
        async with _scripted(cluster, topic, _burst_server(BURST)) as (producer, connection):

            async def one(i: int) -> SendResult:
                return await producer.send(Message(topic, b"n%03d" % i))

            gc.collect()
            before = {id(o) for o in library_coroutines()}  # an earlier test's garbage, if any
            tasks = [asyncio.create_task(one(i)) for i in range(BURST)]
            while len(connection._lean) < BURST:
                await asyncio.sleep(0)
            assert [o for o in library_coroutines() if id(o) not in before] == []
            results = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
            assert all(r.status is SendStatus.SEND_OK for r in results) and not connection._lean

    asyncio.run(main())
