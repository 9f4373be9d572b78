"""Long polling over the wire: a parked pull wakes for every message that reaches its queue.

A pull that finds nothing parks (PullRequestHoldService); the store's dispatch wakes it. The
pull is answered by a coroutine that parks only once it runs, so a message dispatched in
between (the same read's send, served synchronously right after the pull was found empty)
must still wake it: otherwise the pull sleeps out its whole suspend timeout with the message
already in its queue.
"""

from __future__ import annotations

import asyncio
from asyncio import StreamReader
from pathlib import Path

from sparkmq.message.record import iter_records
from sparkmq.protocol import RemotingCommand, ResponseCode
from support.broker_wire import Wire, one_write, pull_frame, run_broker, send_frame

TOPIC = "TopicLongPoll"
SUSPEND_MS = 25_000  # the broker's cap: a missed wake-up answers only after this
# sysFlag 6 below: SUBSCRIPTION | SUSPEND
ANSWER_WAIT_S = 15.0  # far above any answer's time, far below the suspend timeout


def test_a_send_right_behind_a_parking_pull_wakes_it(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"first", queue_id=0)  # creates the topic; queue 0 holds offset 0
        port = w.broker.config.listen_port
        for offset in (1, 2, 3):  # each pull finds its queue empty and parks; the send behind it fills it
            body = f"message {offset}".encode()
            responses = await asyncio.wait_for(
                one_write(
                    port,
                    [
                        pull_frame(1, TOPIC, offset=offset, sys_flag=6, suspend_ms=SUSPEND_MS),
                        send_frame(2, body, TOPIC),
                    ],
                ),
                ANSWER_WAIT_S,
            )
            pulled, sent = responses[1], responses[2]
            assert sent.code == ResponseCode.SUCCESS, sent
            assert pulled.code == ResponseCode.SUCCESS, pulled
            records = list(iter_records(pulled.body, check_crc=True))
            assert [(r.queue_offset, r.body) for r in records] == [(offset, body)]
        assert w.broker.context.holds.parked == 0

    run_broker(tmp_path, scenario)


def _parking_pull(opaque: int, offset: int, queue_id: int = 0, suspend_ms: int = SUSPEND_MS) -> bytes:
    return pull_frame(opaque, TOPIC, queue_id=queue_id, offset=offset, sys_flag=6, suspend_ms=suspend_ms)


async def _parked(w: Wire, count: int) -> None:
    """Until ``count`` pulls are parked (each parks within a loop turn or two of its read)."""
    while w.broker.context.holds.parked < count:
        await asyncio.sleep(0.005)


async def _answers(reader: StreamReader, count: int) -> dict[int, RemotingCommand]:
    answers: dict[int, RemotingCommand] = {}
    while len(answers) < count:
        length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), ANSWER_WAIT_S))
        answer = RemotingCommand.decode(await reader.readexactly(length))
        answers[answer.opaque] = answer
    return answers


def test_one_send_wakes_every_parked_pull_of_its_queue_once(tmp_path: Path) -> None:
    """Pulls parked on three connections, two on one, are each answered once with the record; a
    pull parked on another queue of the same connection stays parked until its own message."""

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"first", queue_id=0)
        port = w.broker.config.listen_port
        sockets = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        try:
            for n, (_, writer) in enumerate(sockets):
                extra = _parking_pull(20, 1) + _parking_pull(21, 0, queue_id=1) if n == 0 else b""
                writer.write(_parking_pull(10 + n, 1) + extra)
            await _parked(w, 5)
            await w.send_ok(TOPIC, b"second", queue_id=0)
            first = await _answers(sockets[0][0], 2)
            others = [await _answers(reader, 1) for reader, _ in sockets[1:]]
            for answer in [*first.values(), *(a for answers in others for a in answers.values())]:
                assert answer.code == ResponseCode.SUCCESS, answer
                assert [(r.queue_offset, r.body) for r in iter_records(answer.body)] == [(1, b"second")]
            assert set(first) == {10, 20} and w.broker.context.holds.parked == 1  # 21 waits for queue 1
            await w.send_ok(TOPIC, b"third", queue_id=1)
            late = (await _answers(sockets[0][0], 1))[21]
            assert [(r.queue_offset, r.body) for r in iter_records(late.body)] == [(0, b"third")]
            for reader, _ in sockets:  # nothing more: every pull was answered once
                assert not reader._buffer  # type: ignore[attr-defined]
        finally:
            for _, writer in sockets:
                writer.close()
        assert w.broker.context.holds.parked == 0

    run_broker(tmp_path, scenario)


def test_a_parked_pull_times_out_with_pull_not_found_and_a_closed_ones_wake_harms_nobody(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"first", queue_id=0)
        port = w.broker.config.listen_port
        _, gone = await asyncio.open_connection("127.0.0.1", port)
        gone.write(_parking_pull(1, 1))
        await _parked(w, 1)
        gone.close()
        await gone.wait_closed()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(_parking_pull(2, 0, queue_id=2, suspend_ms=200))  # nothing arrives on queue 2
            await _parked(w, 2)
            await w.send_ok(TOPIC, b"second", queue_id=0)  # wakes the closed connection's pull
            timed_out = (await _answers(reader, 1))[2]
            assert timed_out.code == ResponseCode.PULL_NOT_FOUND, timed_out
            assert w.broker.context.holds.parked == 0
            writer.write(send_frame(3, b"after", TOPIC))  # the connection serves on
            assert (await _answers(reader, 1))[3].code == ResponseCode.SUCCESS
        finally:
            writer.close()
            await writer.wait_closed()

    run_broker(tmp_path, scenario)
