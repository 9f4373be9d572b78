"""The producer's sends (``sparkmq.client.send_call``) against a real NameServer and broker.

``AsyncProducer.send_async`` completes its asyncio future, then calls the callback, from inside the
connection's read; an unconfirmed answer, a request that times out (a broker that stops answering)
and a connection lost are retried by the one retry policy, for ``send`` and ``send_async`` alike.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pickle
import time
from collections.abc import Iterator
from json.encoder import encode_basestring
from typing import Any, cast

import pytest

from sparkmq import DurabilityNotConfirmedError
from sparkmq.client import AsyncProducer, Message, Producer, SendResult, SendStatus, loop_thread
from sparkmq.client.send_call import SendIds
from sparkmq.errors import RemoteError
from sparkmq.message.msgid import UniqueIdGenerator
from sparkmq.message.names import MASTER_ID
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader
from sparkmq.protocol.codes import PermName
from sparkmq.protocol.frame import decode_frame
from sparkmq.remoting.client_connection import ClientConnection
from support.client_harness import _call, wait_for_route
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


def test_a_broker_that_closes_each_connection_as_it_opens_costs_one_attempt(cluster: UnconfirmingCluster) -> None:
    """The route names a broker that accepts and at once closes every connection: the attempt fails (it never
    reconnects in a loop), and the retry reads the route anew and stores the message on the real broker once."""
    topic = cluster.topic("LeanSlammed", queues=1)

    async def slam(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    async def scenario() -> SendResult:
        server = await asyncio.start_server(slam, "127.0.0.1", 0)
        producer = AsyncProducer("PID_lean_slammed", cluster.ns, retry_times_when_send_failed=1)
        await producer.start()
        try:
            await producer.send(Message(topic, b"warm-up"))
            lane = producer._lanes[topic]
            (broker_name,) = lane.connections
            (broker,) = lane.route.data.broker_datas
            broker.broker_addrs[MASTER_ID] = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
            lane.connections.clear()
            return await asyncio.wait_for(producer.send(Message(topic, b"after")), 60)
        finally:
            await producer.close()
            server.close()
            await server.wait_closed()

    result = asyncio.run(scenario())
    assert (result.status, result.queue_offset) == (SendStatus.SEND_OK, 1)
    assert cluster.stored(topic, 0) == 2


@pytest.mark.parametrize("style", ["send", "send_async"])
def test_a_lean_attempt_that_times_out_is_retried_on_a_fresh_route(
    cluster: UnconfirmingCluster, style: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The lane's connection goes to a broker that never answers: the attempt fails at its deadline
    (the connection's sweeper), and the retry learns the route again and sends to the real broker."""
    topic = cluster.topic(f"LeanTimeout{style}", queues=1)

    async def scenario() -> SendResult:
        server, address = await _silent_broker()
        producer = AsyncProducer("PID_lean_timeout", cluster.ns, send_timeout_s=1.0, retry_times_when_send_failed=1)
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
    assert any("attempt 1/2" in r.getMessage() and "timed out after 1.0 s" in r.getMessage() for r in caplog.records)
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


def at(ids: SendIds, now_ms: int) -> str:
    """A send's id as the producer makes it: the head renewed per millisecond, the counter's four digits."""
    if now_ms != ids.head_ms:
        ids.renew(now_ms)
    return f"{ids.head}{next(ids.counter) & 0xFFFF:04X}"


def test_send_ids_and_results_match_their_references() -> None:
    ids, reference = SendIds(), UniqueIdGenerator()
    ids._prefix = reference._prefix  # same host, pid and random part
    now_ms = 1_700_000_000_123
    first, second = at(ids, now_ms), at(ids, now_ms)
    reference._new_month(now_ms)
    stamp = f"{(now_ms - reference._month_start_ms) & 0xFFFFFFFF:08X}"
    assert first == f"{reference._prefix}{stamp}0000" and second == f"{reference._prefix}{stamp}0001"
    assert at(ids, now_ms + 1)[24:28] != first[24:28] or stamp[-4:] == "FFFF"
    assert len(reference.next_id()) == len(first) == 32
    fresh = SendIds()  # the counter's 4 hex digits, as reference.next_id renders them, through a wrap
    assert [at(fresh, now_ms)[28:] for _ in range(65536 + 300)][-302:] == [
        f"{i & 0xFFFF:04X}" for i in range(65534, 65836)
    ]
    result = SendResult(SendStatus.SEND_OK, "ID", "OFFSET", None, 7)  # type: ignore[arg-type]
    assert result == SendResult(
        status=SendStatus.SEND_OK, msg_id="ID", offset_msg_id="OFFSET", queue=None, queue_offset=7
    )  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        result.queue_offset = 8  # type: ignore[misc]
    copied = pickle.loads(pickle.dumps(result))
    assert (
        copied == result
        and hash(copied) == hash(result)
        and copied != SendResult(SendStatus.SEND_OK, "ID", "", None, 7)
    )  # type: ignore[arg-type]
    lazy = object.__new__(SendResult)  # as a producer's answer makes it: the id's head and last four digits
    lazy._status, lazy._msg_id, lazy._id_tail = SendStatus.SEND_OK, "I", 0xD
    lazy._offset_msg_id, lazy._queue, lazy._queue_offset = "OFFSET", None, 7
    assert lazy.msg_id == "I000D" and lazy == SendResult(SendStatus.SEND_OK, "I000D", "OFFSET", None, 7)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(lazy)) == lazy and repr(lazy).count("I000D") == 1


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


def test_every_message_shape_is_sent_as_the_template_renders_it(cluster: UnconfirmingCluster) -> None:
    """Each message shape's frame, as the connection gets it, is the template's frame of the message's
    properties text with the send's id, queue, opaque and born time, and the result names that id."""
    topic = cluster.topic("SendFrames", queues=2)
    written: list[tuple[int, bytes]] = []

    async def scenario() -> None:
        async with AsyncProducer("PID_send_frames", cluster.ns) as producer:
            await producer.send(Message(topic, b"warm-up"))
            lane = producer._lanes[topic]
            for connection in lane.connections.values():
                send_lean = connection.send_lean

                def recording(opaque: int, code: int, frame: bytes, *rest: Any, _send: Any = send_lean) -> float:
                    written.append((code, frame))
                    return cast(float, _send(opaque, code, frame, *rest))

                connection.send_lean = recording  # type: ignore[method-assign]
            seen: set[str] = set()
            for shape in _SHAPES:
                message = dataclasses.replace(shape, topic=topic)
                result = await producer.send(message)
                code, frame = written[-1]
                command = decode_frame(frame)
                fields = cast(dict[str, str], command.ext_fields)
                body, sys_flag = producer._body_of(message)
                assert frame == lane.template.frame(
                    code,
                    result.queue.queue_id,
                    command.opaque,
                    int(fields["g"]),
                    encode_basestring(message.properties_text(result.msg_id)),  # the reference text, escaped
                    body,
                    sys_flag,
                    message.flag,
                )
                ids = producer._ids
                born_ms = int(fields["g"])
                assert result.msg_id[:28] == f"{ids._prefix}{(born_ms - ids._month_start_ms) & 0xFFFFFFFF:08X}"
                assert result.msg_id not in seen and len(result.msg_id) == 32
                seen.add(result.msg_id)

    asyncio.run(scenario())
    assert len(written) == len(_SHAPES)


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


@pytest.mark.parametrize("style", ["send", "send_async"])
def test_a_route_without_a_writable_queue_is_looked_up_again_each_attempt_then_refused(
    cluster: UnconfirmingCluster, style: str
) -> None:
    """A read-only topic (as a route fetched between a master's death and its successor's registration):
    each attempt asks the NameServer for the route again, and the last one's retriable error is raised."""
    topic = f"SendReadOnly{style}"
    header = CreateTopicRequestHeader(topic, "TBW102", 1, 1, PermName.PERM_READ, "SINGLE_TAG", False).to_fields()
    code, remark, _ = asyncio.run(_call(cluster.broker.config.address, RequestCode.UPDATE_AND_CREATE_TOPIC, header))
    assert code == ResponseCode.SUCCESS, remark
    wait_for_route(cluster.ns, topic, {cluster.broker.config.broker_name})

    async def scenario() -> list[str]:
        async with AsyncProducer("PID_read_only", cluster.ns, retry_times_when_send_failed=2) as producer:
            looked_up: list[str] = []
            publish_route = producer.instance.publish_route

            async def counted(name: str, *rest: Any) -> Any:
                looked_up.append(name)
                return await publish_route(name, *rest)

            producer.instance.publish_route = counted  # type: ignore[method-assign]
            message = Message(topic, b"refused")
            with pytest.raises(RemoteError, match="no writable queue") as refused:
                await (producer.send(message) if style == "send" else producer.send_async(message))
            assert refused.value.retriable
            return looked_up

    assert asyncio.run(scenario()) == [topic] * 3
