"""Sends that several connections write in one event-loop turn are stored as one group
(``RemotingServer.turn_lane``, sparkmq/remoting/turns.py) and each connection gets exactly its
own answers, in its order; with SYNC flush none before the flush that covers it.

The scenario runs in the broker's own event loop: every connection writes its frames in one
synchronous block (``StreamWriter.write`` sends at once), so the broker reads all of them in its
next turn. ``MessageStore.put_lane_groups`` is wrapped to record how many connections' groups
each put held: the tests check that one put held them all, then check every answer and record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sparkmq import native
from sparkmq.broker.controller import BrokerController
from sparkmq.errors import DiskError
from sparkmq.message.msgid import decode_offset_msg_id
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.frame import FrameDecoder
from sparkmq.remoting import RemotingConnection
from sparkmq.remoting.turns import LONE_TURNS, SWITCHES
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, run_broker
from support.native_lane import send_frame

pytestmark = pytest.mark.skipif(native.sendlane is None, reason="native lane off or not built")

CONNECTIONS = 8
SENDS = 3  # per connection, in one write
TOPIC = "TurnTopic"


def _body(connection: int, send: int) -> bytes:
    return f"c{connection}-m{send}".encode()


def _frames(connection: int) -> list[bytes]:
    opaque = 1000 * (connection + 1)
    return [
        send_frame(opaque + send, topic=TOPIC, queue_id=str(send % 4), body=_body(connection, send))
        for send in range(SENDS)
    ]


def _record_puts(broker: BrokerController) -> list[int]:
    """Wrap the store's lane puts (a turn's groups; one read's group) to record how many sends each
    call held (in however many groups: with ASYNC flush a turn's groups are merged into one)."""
    store, sizes, nested = broker.store, [], []
    real_groups, real_group = store.put_lane_groups, store.put_lane_group

    def recorded_groups(groups: Sequence[Any]) -> Any:
        sizes.append(sum(group.count for group in groups))
        nested.append(True)  # put_lane_groups of one group is put_lane_group's: recorded once
        try:
            return real_groups(groups)
        finally:
            nested.pop()

    def recorded_group(group: Any) -> Any:
        if not nested:
            sizes.append(group.count)
        return real_group(group)

    store.put_lane_groups = recorded_groups  # type: ignore[method-assign]
    store.put_lane_group = recorded_group  # type: ignore[method-assign]
    return sizes


async def _connect(port: int, count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    return [await asyncio.open_connection("127.0.0.1", port) for _ in range(count)]


async def _answers(reader: asyncio.StreamReader, count: int) -> tuple[list[Any], bool]:
    """Up to ``count`` responses in arrival order, and whether the broker closed the connection."""
    decoder, answers = FrameDecoder(), []
    while len(answers) < count:
        data = await reader.read(65536)
        if not data:
            return answers, True
        answers += decoder.feed(data)
    return answers, False


def _burst(
    connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]], writes: list[bytes], eof: bool = False
) -> None:
    """Every connection's bytes written in one synchronous block: the broker reads them in one turn."""
    for (_reader, writer), data in zip(connections, writes, strict=True):
        writer.write(data)
        if eof:
            writer.write_eof()


async def _close(connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]) -> None:
    for _reader, writer in connections:
        writer.close()
        await writer.wait_closed()


async def _stored(w: Wire) -> dict[bytes, tuple[int, int, int]]:
    """Every stored message of the topic: body -> (queue id, queue offset, physical offset)."""
    stored: dict[bytes, tuple[int, int, int]] = {}
    for queue_id in range(4):
        for record in await w.pull_records("G", TOPIC, queue_id, max_nums=64):
            assert bytes(record.body) not in stored, "stored once"
            stored[bytes(record.body)] = (record.queue_id, record.queue_offset, record.physical_offset)
    return stored


def _check_answers(
    connection: int, answers: list[Any], stored: dict[bytes, tuple[int, int, int]], code: int = ResponseCode.SUCCESS
) -> None:
    """The connection's answers are its requests' opaques in order, each naming its own record."""
    assert [a.opaque for a in answers] == [1000 * (connection + 1) + send for send in range(SENDS)]
    for send, answer in enumerate(answers):
        assert answer.code == code, answer
        queue_id, queue_offset, physical = stored[_body(connection, send)]
        fields = answer.ext_fields
        assert (int(fields["queueId"]), int(fields["queueOffset"])) == (queue_id, queue_offset)
        assert decode_offset_msg_id(fields["msgId"])[2] == physical


async def _one_turn(w: Wire) -> list[tuple[list[Any], bool]]:
    """Every connection's sends written in one turn, stored by one put; each connection's answers."""
    connections = await _connect(w.broker.config.listen_port, CONNECTIONS)
    puts = _record_puts(w.broker)
    _burst(connections, [b"".join(_frames(c)) for c in range(CONNECTIONS)])
    results = await asyncio.gather(*(_answers(reader, SENDS) for reader, _writer in connections))
    await _close(connections)
    assert puts[0] == CONNECTIONS * SENDS, f"one put held every connection's sends: {puts}"
    return results


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_sends_of_many_connections_in_one_turn_are_one_put(
    tmp_path: Path, flush: FlushDiskType, monkeypatch: pytest.MonkeyPatch
) -> None:
    unflushed: list[Any] = []  # answers the broker wrote before the flush covering them
    store: list[Any] = []
    real_write = RemotingConnection.write_frame

    def write_frame(self: RemotingConnection, head: bytes, body: bytes = b"", *, at_once: bool = False) -> None:
        flushed = store[0].commitlog.queue.flushed_offset if store else 0
        for command in FrameDecoder().feed(head + body):
            msg_id = command.ext_fields.get("msgId") if command.is_response else None
            if msg_id is not None and decode_offset_msg_id(msg_id)[2] >= flushed:
                unflushed.append(command)
        real_write(self, head, body, at_once=at_once)

    monkeypatch.setattr(RemotingConnection, "write_frame", write_frame)

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create")
        store.append(w.broker.store)
        unflushed.clear()
        results = await _one_turn(w)
        if flush is FlushDiskType.SYNC_FLUSH:
            assert not unflushed, unflushed
        stored = await _stored(w)
        assert len(stored) == CONNECTIONS * SENDS + 1
        for connection, (answers, closed) in enumerate(results):
            assert not closed
            _check_answers(connection, answers, stored)

    run_broker(tmp_path, scenario, flush_disk_type=flush)


def test_a_sync_master_without_a_slave_answers_each_connection_of_a_turn_slave_not_available(tmp_path: Path) -> None:
    """One put for the turn; each connection's sends stored and answered with their own records."""

    async def scenario(w: Wire) -> None:
        await w.send(TOPIC, b"create")
        results = await _one_turn(w)
        stored = await _stored(w)
        for connection, (answers, _closed) in enumerate(results):
            _check_answers(connection, answers, stored, ResponseCode.SLAVE_NOT_AVAILABLE)

    run_broker(tmp_path, scenario, broker_role="SYNC_MASTER")


def test_reads_held_for_the_turn_with_a_cut_frame_or_another_request_first(tmp_path: Path) -> None:
    """A turn's reads wait for its end as they came: connection 0's read ends with the head of its
    last send (decoded once its rest arrives), connection 1's starts with a GET_MAX_OFFSET the lane
    leaves (its sends are decoded behind it); the turn's group holds every other whole send. Every
    request is answered once, in order, and every send is stored once."""

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create")
        connections = await _connect(w.broker.config.listen_port, CONNECTIONS)
        puts = _record_puts(w.broker)
        frames = [_frames(c) for c in range(CONNECTIONS)]
        last = frames[0][-1]
        ping = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, 1999, ext_fields={"topic": TOPIC, "queueId": "0"})
        writes = [b"".join(f) for f in frames]
        writes[0] = writes[0][: -len(last) // 2]
        writes[1] = ping.encode() + writes[1]
        _burst(connections, writes)
        counts = [SENDS - 1, SENDS + 1] + [SENDS] * (CONNECTIONS - 2)
        results = await asyncio.gather(*(_answers(r, n) for (r, _w), n in zip(connections, counts, strict=True)))
        connections[0][1].write(last[-len(last) // 2 :])
        rest, closed = await _answers(connections[0][0], 1)
        await _close(connections)
        assert puts[0] == (CONNECTIONS - 2) * SENDS + SENDS - 1, f"the turn's whole lane sends in one put: {puts}"
        assert sum(puts) == (CONNECTIONS - 1) * SENDS, puts  # connection 1's were decoded
        stored = await _stored(w)
        assert len(stored) == CONNECTIONS * SENDS + 1
        assert not closed and all(not c for _a, c in results)
        _check_answers(0, results[0][0] + rest, stored)
        answers = results[1][0]
        assert sorted(a.opaque for a in answers) == [1999] + [2000 + send for send in range(SENDS)]
        assert next(a for a in answers if a.opaque == 1999).code == ResponseCode.SUCCESS
        _check_answers(1, [a for a in answers if a.opaque != 1999], stored)
        for connection in range(2, CONNECTIONS):
            _check_answers(connection, results[connection][0], stored)

    run_broker(tmp_path, scenario)


def test_a_malformed_frame_fails_only_its_connection(tmp_path: Path) -> None:
    """One connection's sends are followed by an impossible frame length, another's by a send with a
    malformed header: the first gets its answers and is closed, the second gets its answers and the
    error of its bad request, and the rest of the turn's connections are stored and answered."""

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create")
        connections = await _connect(w.broker.config.listen_port, CONNECTIONS)
        puts = _record_puts(w.broker)
        writes = [b"".join(_frames(c)) for c in range(CONNECTIONS)]
        writes[0] += (2).to_bytes(4) + b"\x00\x00"  # a frame length below any header: a protocol error
        writes[1] += send_frame(2999, topic=TOPIC, queue_id="x")
        _burst(connections, writes)
        results = await asyncio.gather(
            *(_answers(reader, SENDS + (c == 1) + (c == 0)) for c, (reader, _writer) in enumerate(connections))
        )
        await _close(connections)
        assert puts[0] == CONNECTIONS * SENDS, puts
        stored = await _stored(w)
        assert len(stored) == CONNECTIONS * SENDS + 1
        answers, closed = results[0]
        assert closed and len(answers) == SENDS, "its sends answered, then closed"
        _check_answers(0, answers, stored)
        answers, closed = results[1]
        assert not closed and answers[-1].opaque == 2999 and answers[-1].code != ResponseCode.SUCCESS
        _check_answers(1, answers[:-1], stored)
        for connection in range(2, CONNECTIONS):
            answers, closed = results[connection]
            assert not closed
            _check_answers(connection, answers, stored)

    run_broker(tmp_path, scenario)


def test_a_connection_whose_turn_fails_to_prepare_is_closed_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in one connection's part of the turn (its prepare raises): that connection is closed with
    nothing stored for it, the other connections of the turn are stored in one put and answered."""
    real_prepare = RemotingConnection.prepare_turn
    broken: list[int] = []

    def prepare_turn(self: RemotingConnection, prepare: Any) -> Any:
        if self.id in broken:
            raise RuntimeError("a bug in this connection's turn")
        return real_prepare(self, prepare)

    monkeypatch.setattr(RemotingConnection, "prepare_turn", prepare_turn)

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create")
        before = {c.id for c in w.broker.server.connections}
        connections = await _connect(w.broker.config.listen_port, CONNECTIONS)
        while len(w.broker.server.connections) < len(before) + CONNECTIONS:
            await asyncio.sleep(0)  # the broker accepts them in its own turns
        ours = sorted(c.id for c in w.broker.server.connections if c.id not in before)
        broken.append(ours[0])  # the first connection accepted: the first one opened
        puts = _record_puts(w.broker)
        _burst(connections, [b"".join(_frames(c)) for c in range(CONNECTIONS)])
        results = await asyncio.gather(*(_answers(reader, SENDS) for reader, _writer in connections))
        await _close(connections)
        assert puts[0] == (CONNECTIONS - 1) * SENDS, puts
        stored = await _stored(w)
        assert len(stored) == (CONNECTIONS - 1) * SENDS + 1
        assert results[0] == ([], True), "closed, nothing answered"
        for connection in range(1, CONNECTIONS):
            answers, closed = results[connection]
            assert not closed
            _check_answers(connection, answers, stored)

    run_broker(tmp_path, scenario)


def test_connections_closing_in_the_same_turn_get_their_answers(tmp_path: Path) -> None:
    """Sends followed at once by the peer's end of stream: answered, then the connection closes."""

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create")
        connections = await _connect(w.broker.config.listen_port, CONNECTIONS)
        _burst(connections, [b"".join(_frames(c)) for c in range(CONNECTIONS)], eof=True)
        results = await asyncio.gather(*(_answers(reader, SENDS + 1) for reader, _writer in connections))
        await _close(connections)
        stored = await _stored(w)
        for connection, (answers, closed) in enumerate(results):
            assert closed, "closed once answered"
            _check_answers(connection, answers, stored)

    run_broker(tmp_path, scenario)


def test_grouping_stops_for_a_lone_connection_and_resumes_for_many(tmp_path: Path) -> None:
    """One connection sending one request at a time is served as it reads (no turn to wait for);
    once several connections read together their sends are grouped again."""

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create")
        for i in range(2 * LONE_TURNS):  # one reader a turn: grouping stops
            await w.send_ok(TOPIC, f"lone-{i}".encode())
        turns = w.broker.server._turns  # noqa: SLF001 - the state this test is about
        assert not turns._grouping  # noqa: SLF001
        connections = await _connect(w.broker.config.listen_port, CONNECTIONS)
        puts = _record_puts(w.broker)
        _burst(connections, [b"".join(_frames(c)) for c in range(CONNECTIONS)])
        results = await asyncio.gather(*(_answers(reader, SENDS) for reader, _writer in connections))
        await _close(connections)
        assert turns._grouping  # noqa: SLF001
        # a few served as they read until grouping resumed, the rest of the turn in one put
        assert sum(puts) == CONNECTIONS * SENDS and max(puts) >= (CONNECTIONS - SWITCHES + 1) * SENDS, puts
        stored = await _stored(w)
        assert len(stored) == CONNECTIONS * SENDS + 1 + 2 * LONE_TURNS
        for connection, (answers, closed) in enumerate(results):
            assert not closed
            _check_answers(connection, answers, stored)

    run_broker(tmp_path, scenario)


def test_a_disk_error_in_a_grouped_put_undoes_every_connections_sends(tmp_path: Path) -> None:
    """The index's msync fails inside the one put of eight connections' sends (an IndexFile synced on
    its roll): every record of the group is undone, each connection gets a failure for each of its
    sends and none a SUCCESS, what was acknowledged before stays readable, and the broker goes on
    answering reads (writes stay refused until a restart recovers the store: fail-stop)."""

    def failing_put(*_args: Any) -> None:
        raise DiskError("msync of a finished index file: [Errno 5] Input/output error")

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create")
        connections = await _connect(w.broker.config.listen_port, CONNECTIONS)
        puts = _record_puts(w.broker)
        w.broker.store.index.put = failing_put  # type: ignore[method-assign]
        _burst(connections, [b"".join(_frames(c)) for c in range(CONNECTIONS)])
        results = await asyncio.gather(*(_answers(reader, SENDS) for reader, _writer in connections))
        await _close(connections)
        assert puts and puts[0] == CONNECTIONS * SENDS, f"the sends were one grouped put: {puts}"
        for connection, (answers, closed) in enumerate(results):
            assert not closed
            assert [a.opaque for a in answers] == [1000 * (connection + 1) + send for send in range(SENDS)]
            assert all(a.code != ResponseCode.SUCCESS for a in answers), answers
        assert w.broker.store.disk_error is not None
        assert list(await _stored(w)) == [b"create"]  # nothing of the failed group is left, the rest is

    run_broker(tmp_path, scenario)


def test_a_disk_error_in_a_lone_put_undoes_its_sends(tmp_path: Path) -> None:
    """One connection's read alone in its turn takes the lone put (``put_lane_group``): when the
    index's msync fails inside it, its records are undone, each send gets a failure and none a
    SUCCESS, the connection stays open and what was acknowledged before stays readable."""

    def failing_put(*_args: Any) -> None:
        raise DiskError("msync of a finished index file: [Errno 5] Input/output error")

    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create")
        for send in range(SENDS):  # every queue the frames name exists: the lane's plain put
            await w.send_ok(TOPIC, f"queue-{send}".encode(), queue_id=send % 4)
        connections = await _connect(w.broker.config.listen_port, 1)
        puts = _record_puts(w.broker)
        w.broker.store.index.put = failing_put  # type: ignore[method-assign]
        _burst(connections, [b"".join(_frames(0))])
        answers, closed = await _answers(connections[0][0], SENDS)
        await _close(connections)
        assert puts == [SENDS], f"one lone put of the read's sends: {puts}"
        assert not closed
        assert [a.opaque for a in answers] == [1000 + send for send in range(SENDS)]
        assert all(a.code != ResponseCode.SUCCESS for a in answers), answers
        assert w.broker.store.disk_error is not None
        assert sorted(await _stored(w)) == sorted([b"create"] + [f"queue-{s}".encode() for s in range(SENDS)])

    run_broker(tmp_path, scenario)
