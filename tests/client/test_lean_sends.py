"""The producer's lean single sends (``sparkmq.client.lean_send``) against a real NameServer and broker.

``AsyncProducer.send_async`` completes its asyncio future, then calls the callback, from inside the
connection's read; an unconfirmed answer, a request that times out (a broker that stops answering)
and a connection lost go on through the general retry path, as ``send``'s do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import cast

import pytest

from sparkmq import DurabilityNotConfirmedError
from sparkmq.client import AsyncProducer, Message, Producer, SendResult, SendStatus, loop_thread
from sparkmq.client import producer as producer_module
from sparkmq.client.lean_send import (
    RESULT_FIELDS,
    WAITER_FIELDS,
    CallbackSend,
    SendIds,
    _slotted_python,
    slotted,
)
from sparkmq.message.msgid import UniqueIdGenerator
from sparkmq.protocol import ResponseCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.frame import decode_frame
from sparkmq.remoting import client_native
from sparkmq.remoting.client_connection import ClientConnection
from support.unconfirming_broker import UnconfirmingCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnconfirmingCluster]:
    with UnconfirmingCluster.start(tmp_path_factory.mktemp("lean")) as running:
        yield running


@pytest.fixture(autouse=True)
def _clear(cluster: UnconfirmingCluster) -> Iterator[None]:
    cluster.answers.clear()
    cluster.always.clear()
    yield
    cluster.always.clear()


def test_send_async_completes_its_future_then_calls_back_on_every_outcome(cluster: UnconfirmingCluster) -> None:
    topic = cluster.topic("LeanCallbacks", queues=1)

    async def scenario() -> list[tuple[asyncio.Future[SendResult], asyncio.Future[SendResult]]]:
        async with AsyncProducer("PID_lean_callbacks", cluster.ns) as producer:
            await producer.send(Message(topic, b"warm-up"))  # route and connection held: the next sends are lean
            called: list[tuple[asyncio.Future[SendResult], asyncio.Future[SendResult]]] = []
            cluster.answers.append(ResponseCode.FLUSH_DISK_TIMEOUT)  # the first attempt is retried
            retried = producer.send_async(Message(topic, b"retried"), lambda done: called.append((retried, done)))
            assert (await retried).queue_offset == 2
            cluster.always.append(ResponseCode.SLAVE_NOT_AVAILABLE)
            failed = producer.send_async(Message(topic, b"never"), lambda done: called.append((failed, done)))
            with pytest.raises(DurabilityNotConfirmedError):
                await failed
            return called

    called = asyncio.run(scenario())
    assert [given is returned for returned, given in called] == [True, True]
    assert cluster.stored(topic, 0) == 6  # warm-up, unconfirmed + retry, 3 unconfirmed attempts


def test_a_raising_callback_is_logged_and_sending_goes_on(
    cluster: UnconfirmingCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic = cluster.topic("LeanRaisingCallback", queues=1)

    def broken(done: asyncio.Future[SendResult]) -> None:
        raise ValueError("the caller's bug")

    async def scenario() -> SendResult:
        async with AsyncProducer("PID_lean_raising", cluster.ns) as producer:
            await producer.send(Message(topic, b"warm-up"))
            first = producer.send_async(Message(topic, b"a"), broken)
            await first
            return await producer.send_async(Message(topic, b"b"))

    with caplog.at_level(logging.ERROR, logger="sparkmq.client.producer"):
        assert asyncio.run(scenario()).queue_offset == 2
    assert any("send callback" in r.getMessage() and r.exc_info for r in caplog.records)


async def _silent_broker() -> tuple[asyncio.Server, str]:
    """A broker that accepts a connection and never answers (a hung broker)."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.mark.parametrize("style", ["send", "send_async"])
def test_a_lean_attempt_that_times_out_is_retried_on_a_fresh_route(
    cluster: UnconfirmingCluster, style: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The lane's connection goes to a broker that never answers: the attempt fails at its deadline
    (the connection's sweeper), and the retry learns the route again and sends to the real broker."""
    topic = cluster.topic(f"LeanTimeout{style}", queues=1)

    async def scenario() -> SendResult:
        server, address = await _silent_broker()
        producer = AsyncProducer("PID_lean_timeout", cluster.ns, send_timeout_s=0.2, retry_times_when_send_failed=1)
        await producer.start()
        try:
            await producer.send(Message(topic, b"warm-up"))
            lane = producer._lanes[topic]
            (broker_name,) = lane.connections
            silent = await producer.instance.remoting.connection(address)
            lane.connections[broker_name] = cast(ClientConnection, silent)
            message = Message(topic, b"after")
            return await (producer.send(message) if style == "send" else producer.send_async(message))
        finally:
            await producer.close()
            server.close()
            await server.wait_closed()

    with caplog.at_level(logging.WARNING, logger="sparkmq.client.producer"):
        result = asyncio.run(scenario())
    assert (result.status, result.queue_offset) == (SendStatus.SEND_OK, 1)
    assert any("attempt 1/2" in r.getMessage() and "timed out after 0.2 s" in r.getMessage() for r in caplog.records)
    assert cluster.stored(topic, 0) == 2


def test_a_blocking_send_that_outlives_its_timeout_raises_timeout_error_and_its_attempt_goes_on(
    cluster: UnconfirmingCluster,
) -> None:
    """``Producer.send(timeout_s=...)`` waits on a :class:`loop_thread.Handoff`: past the caller's timeout it
    raises TimeoutError, while the attempt itself goes on (retried at its own deadline, then stored), and
    the late outcome harms nothing: the producer keeps sending."""
    topic = cluster.topic("LeanBlockingTimeout", queues=1)
    with Producer(
        "PID_lean_blocking_timeout", cluster.ns, send_timeout_s=0.3, retry_times_when_send_failed=1
    ) as producer:
        producer.send(Message(topic, b"warm-up"))

        async def silence_the_lane() -> asyncio.Server:
            server, address = await _silent_broker()
            lane = producer._async._lanes[topic]
            (broker_name,) = lane.connections
            silent = await producer._async.instance.remoting.connection(address)
            lane.connections[broker_name] = cast(ClientConnection, silent)
            return server

        server = loop_thread.run(silence_the_lane(), 30)
        try:
            with pytest.raises(TimeoutError, match="no outcome within 0.05 s"):
                producer.send(Message(topic, b"late"), timeout_s=0.05)
            deadline = time.monotonic() + 30
            while cluster.stored(topic, 0) < 2 and time.monotonic() < deadline:  # the retry stores it
                time.sleep(0.01)
            assert cluster.stored(topic, 0) == 2
            result = producer.send(Message(topic, b"next"), timeout_s=30)
            assert (result.status, result.queue_offset) == (SendStatus.SEND_OK, 2)
        finally:
            server.close()
            loop_thread.run(server.wait_closed(), 30)


def test_send_ids_and_results_match_their_references() -> None:
    ids, reference = SendIds(), UniqueIdGenerator()
    ids._prefix = reference._prefix  # same host, pid and random part
    now_ms = 1_700_000_000_123
    first, second = ids.at(now_ms), ids.at(now_ms)
    reference._new_month(now_ms)
    stamp = f"{(now_ms - reference._month_start_ms) & 0xFFFFFFFF:08X}"
    assert first == f"{reference._prefix}{stamp}0000" and second == f"{reference._prefix}{stamp}0001"
    assert ids.at(now_ms + 1)[24:28] != first[24:28] or stamp[-4:] == "FFFF"
    assert len(reference.next_id()) == len(first) == 32
    fresh = SendIds()  # the counter's 4 hex digits, as reference.next_id renders them, through a wrap
    assert [fresh.at(now_ms)[28:] for _ in range(65536 + 300)][-302:] == [
        f"{i & 0xFFFF:04X}" for i in range(65534, 65836)
    ]
    result = SendResult(SendStatus.SEND_OK, "ID", "OFFSET", None, 7)  # type: ignore[arg-type]
    assert result == SendResult(
        status=SendStatus.SEND_OK, msg_id="ID", offset_msg_id="OFFSET", queue=None, queue_offset=7
    )  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        result.queue_offset = 8  # type: ignore[misc]


_SHAPES = [
    Message("", b""),
    Message("", b"plain body"),
    Message("", b"x" * 4095),  # the longest body sent as is
    Message("", b"y" * 5000),  # compressed: the Python path
    Message("", "text body é", flag=-7),  # a str body: the Python path
    Message("", b"no wait", wait_store_ok=False, flag=2**31 - 1),
    Message("", b"tagged", tags="books"),
    Message("", b"keyed", keys=["k1", 'k"2\\']),
    Message("", b"delayed", delay_level=3),
    Message("", b"props", properties={"a": "ü€\n\t", "b": '"'}),
]


@pytest.mark.parametrize("native", [True, False])
def test_lean_frames_equal_the_python_reference_for_every_message_shape(
    cluster: UnconfirmingCluster, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    """Each first attempt's id and frame, from the C lane's send_frame (plain messages) or the Python path,
    are the bytes SendTemplate.frame_python renders of the message's properties text with that id."""
    topic = cluster.topic("LeanFrames", queues=2)
    c_calls: list[bytes] = []
    if not native:
        monkeypatch.setattr(producer_module, "_send_frame", None)
        monkeypatch.setattr(client_native, "Sender", None)  # the producer below makes no C Sender
    elif producer_module._send_frame is not None:
        real = producer_module._send_frame

        def counted(*args: object) -> object:
            c_calls.append(args[-1])  # type: ignore[arg-type]
            return real(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(producer_module, "_send_frame", counted)

    async def scenario() -> None:
        async with AsyncProducer("PID_lean_frames", cluster.ns) as producer:
            await producer.send(Message(topic, b"warm-up"))
            ids, template = producer._ids, producer._lanes[topic].template
            seen: set[str] = set()
            for shape in _SHAPES:
                message = dataclasses.replace(shape, topic=topic)
                lean = producer._lean_send(message)  # made ready, not sent: nothing is left in flight
                assert lean is not None
                unique_id, frame, queue, _connection, opaque = lean
                born_ms = int(decode_frame(frame).ext_fields["g"])  # type: ignore[index]
                body, sys_flag = producer._body_of(message)
                properties = message.properties_text(unique_id)
                assert frame == template.frame_python(
                    queue.queue_id, opaque, born_ms, properties, body, sys_flag, message.flag
                )
                assert unique_id[:28] == f"{ids._prefix}{(born_ms - ids._month_start_ms) & 0xFFFFFFFF:08X}"
                assert unique_id not in seen and len(unique_id) == 32
                seen.add(unique_id)
                # the C Sender's whole lean attempt (prepared, not sent) renders the same bytes for the messages
                # it takes (plain, a bytes body sent as is) and leaves the others to this Python path (None)
                if producer._sender is not None:
                    made = producer._sender.prepare(message)
                    if type(message.body) is bytes and len(message.body) < 4096 and shape in plain:
                        unique_id, frame, queue, _connection, opaque = made
                        born_ms = int(decode_frame(frame).ext_fields["g"])  # type: ignore[index]
                        assert frame == template.frame_python(
                            queue.queue_id,
                            opaque,
                            born_ms,
                            message.properties_text(unique_id),
                            message.body,
                            0,
                            message.flag,
                        )
                        assert unique_id not in seen and len(unique_id) == 32
                        seen.add(unique_id)
                        sender_made.append(message.body)
                    else:
                        assert made is None
            # and a plain send goes through (the C Sender's, or the Python lean path's) and returns its id
            result = await producer.send(Message(topic, b"after"))
            assert result.msg_id not in seen and result.status is SendStatus.SEND_OK

    plain = [m for m in _SHAPES if not (m.tags or m.keys or m.properties or m.delay_level)]
    sender_made: list[bytes] = []
    asyncio.run(scenario())
    with_sender = native and client_native.Sender is not None
    assert len(c_calls) == (len(plain) + (0 if with_sender else 1) if native and client_native.send_frame else 0)
    assert sender_made == ([b"", b"plain body", b"x" * 4095, b"no wait"] if with_sender else [])


def test_an_awaited_lean_send_answered_unconfirmed_is_retried_and_its_retry_returned(
    cluster: UnconfirmingCluster,
) -> None:
    topic = cluster.topic("LeanAwaitRetried", queues=1)

    async def scenario() -> list[SendResult]:
        async with AsyncProducer("PID_lean_await_retried", cluster.ns) as producer:
            await producer.send(Message(topic, b"warm-up"))
            results = []
            for message in (Message(topic, b"z" * 6000), Message(topic, b"tagged", tags="t", keys="k")):
                cluster.answers.append(ResponseCode.FLUSH_DISK_TIMEOUT)  # the lean first attempt is not confirmed
                results.append(await producer.send(message))
            cluster.always.append(ResponseCode.SLAVE_NOT_AVAILABLE)
            with pytest.raises(DurabilityNotConfirmedError) as never:
                await producer.send(Message(topic, b"never"))
            assert never.value.status == "SLAVE_NOT_AVAILABLE"
            return results

    results = asyncio.run(scenario())
    assert [r.queue_offset for r in results] == [2, 4]  # each stored twice: the unconfirmed attempt and the retry
    assert all(r.status is SendStatus.SEND_OK and len(r.msg_id) == 32 for r in results)
    assert cluster.stored(topic, 0) == 8  # warm-up, 2 x 2, 3 unconfirmed attempts


def test_the_c_lanes_slotted_objects_equal_the_python_constructors() -> None:
    queue = MessageQueue("T", "broker-a", 3)
    expected = SendResult(SendStatus.SEND_OK, "ID", "OFFSET", queue, 2**40)
    waiter_values = (object(), Message("T", b""), "ID", queue, object(), print, 12.5)
    for make in {slotted, _slotted_python}:
        made = make(SendResult, RESULT_FIELDS, SendStatus.SEND_OK, "ID", "OFFSET", queue, 2**40)
        assert type(made) is SendResult and made == expected and hash(made) == hash(expected)
        assert repr(made) == repr(expected) and made.queue is queue and made.queue_offset == 2**40
        with pytest.raises(AttributeError):
            made.queue_offset = 8  # type: ignore[misc]
        waiter = make(CallbackSend, WAITER_FIELDS, *waiter_values)
        reference = CallbackSend(*waiter_values)  # type: ignore[arg-type]
        assert type(waiter) is CallbackSend and not waiter.done()
        assert [getattr(waiter, name) for name in WAITER_FIELDS] == [getattr(reference, n) for n in WAITER_FIELDS]
        assert [getattr(waiter, name) for name in WAITER_FIELDS] == list(waiter_values)
    if client_native.slotted is not None:
        with pytest.raises(TypeError):
            client_native.slotted("not a type", (), 1)
        with pytest.raises(TypeError):
            client_native.slotted(SendResult, ("status",), 1, 2)  # a value per name
        with pytest.raises(AttributeError):
            client_native.slotted(SendResult, ("no_such_slot",), 1)
