"""A broker answers the same reads the same way with its native send lane and without it.

The same frames (plain sends on two topics among refusals, malformed headers, a delayed
message, a batch, a pull) go to a fresh broker twice, as one socket write each time: once with
the lane (``RemotingServer.lane``), once with it off, as under ``SPARKMQ_NATIVE=0``. The
responses (codes, remarks, queue ids and offsets, the msgIds' log positions) and the stored
records must agree, and the lane must have served the plain sends.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkmq import native
from sparkmq.message.batch import encode_batch_items
from sparkmq.message.msgid import decode_offset_msg_id
from sparkmq.message.record import StoredMessage, iter_records
from sparkmq.protocol import PermName, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.namesrv_bodies import TopicConfig
from sparkmq.remoting.lanes import Lanes
from sparkmq.store import disk
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, counted_lane, one_write, run_broker
from support.disk_faults import StalledSync
from support.native_lane import batch_frame, cpp_fields, send_frame, v1_frame

pytestmark = pytest.mark.skipif(native.sendlane is None, reason="native lane off or not built")

MAX_MESSAGE = 4096


def _frames() -> list[bytes]:
    props = "TAGS\x01T\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U{}\x02WAIT\x01true"
    plain = [
        send_frame(i, topic=("LaneA", "LaneB")[i % 2], queue_id=str(i % 3), properties=props.format(i))
        for i in range(1, 9)
    ]
    return [
        *plain[:4],
        send_frame(20, queue_id="x", topic="LaneA"),  # a malformed header: its own error
        send_frame(21, topic="bad topic!"),
        send_frame(22, topic="LaneA", queue_id="9"),  # over the topic's queues
        send_frame(23, topic="LaneA", body=b"x" * (MAX_MESSAGE + 1)),
        send_frame(24, topic="LaneNew"),  # created on send, by the Python path
        send_frame(25, topic="LaneA", properties="DELAY\x012"),
        send_frame(26, topic="LaneA", properties="TRAN_MSG\x01true\x02UNIQ_KEY\x01TXU", extra={"a": "PID_TX"}),
        RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2,
            27,
            ext_fields={
                "a": "P",
                "b": "LaneB",
                "c": "TBW102",
                "d": "4",
                "e": "0",
                "f": "0",
                "g": "1",
                "h": "0",
                "m": "true",
            },
            body=encode_batch_items([b"b1", b"b2"], [b"K\x01v", b""], [0, 0]),
        ).encode(),
        *plain[4:],
        _raw(b'{"code":310,"opaque":28,"flag":0,"extFields":{"b":"LaneA"}}', b"no other field"),
        send_frame(29, topic="LaneB"),
    ]


def _pull(opaque: int, topic: str = "LaneA", queue_id: str = "0", offset: str = "0", **extra: str) -> bytes:
    fields = {
        "consumerGroup": "CID_LANE",
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": "32",
        "sysFlag": "5",  # commit offset + subscription
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
        "subscription": "*",
        "expressionType": "TAG",
    }
    fields.update(extra)
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque, ext_fields=fields).encode()


def _pulls() -> list[bytes]:
    """Pulls the lane answers (records found), then ones it leaves: nothing found, a refused topic,
    a tag filter matching nothing, a bad subscription, a queue over the topic's, a bad number."""
    return [
        _pull(100, queue_id="0"),
        _pull(101, queue_id="1"),
        _pull(102, topic="LaneB", queue_id="2", maxMsgNums="1"),
        _pull(103, subscription="T || U"),
        _pull(104, queue_id="3"),  # nothing stored there
        _pull(105, topic="LaneNope"),
        _pull(106, subscription="Nope"),
        _pull(107, subscription="a > ", expressionType="SQL92"),
        _pull(108, queue_id="9"),
        _pull(109, queueOffset="x"),
        _pull(110, queue_id="0", offset="1", commitOffset="-1"),
        _pull(111, topic="LaneB", queue_id="1"),
    ]


def _raw(header: bytes, body: bytes) -> bytes:
    return (4 + len(header) + len(body)).to_bytes(4) + len(header).to_bytes(4) + header + body


def _record(r: StoredMessage) -> tuple[Any, ...]:
    """What two brokers store alike (not the store time, nor the born port of their connections)."""
    return (
        r.topic,
        r.queue_id,
        r.queue_offset,
        r.physical_offset,
        bytes(r.body),
        r.properties,
        r.flag,
        r.sys_flag,
        r.born_timestamp,
        r.reconsume_times,
    )


def _comparable(response: RemotingCommand) -> tuple[Any, ...]:
    fields = dict(response.ext_fields)
    msg_id = fields.pop("msgId", None)
    position = None if msg_id is None else [decode_offset_msg_id(one)[2] for one in msg_id.split(",")]
    records = [_record(r) for r in iter_records(response.body, check_crc=True)] if response.body else []
    return response.code, response.remark, sorted(fields.items()), position, records


@dataclass
class _Outcome:
    responses: dict[int, tuple[Any, ...]]
    stored: list[tuple[Any, ...]]
    taken: int  # bytes the lane served
    rpc_counts: dict[tuple[int, int], float]  # requests per (request code, response code) in the broker's stats


def _run(tmp_path: Path, lane_on: bool, flush: FlushDiskType, writes: list[list[bytes]] | None = None) -> _Outcome:
    """``writes`` (default: the V2 sends, then the pulls), each as one socket write, to a fresh broker."""
    outcome: dict[str, Any] = {}

    async def scenario(w: Wire) -> None:
        server = w.broker.server
        counted, taken = counted_lane(server.lane)

        server.lane = counted if lane_on else None
        for topic in ("LaneA", "LaneB"):
            await w.send_ok(topic, b"create", queue_id=0)
        responses: dict[int, RemotingCommand] = {}
        for frames in [_frames(), _pulls()] if writes is None else writes:
            responses.update(await one_write(w.broker.config.listen_port, frames))
        outcome["responses"] = {opaque: _comparable(r) for opaque, r in responses.items()}
        stored = []
        for topic in ("LaneA", "LaneB", "LaneNew", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"):
            for queue_id in range(4):
                stored += [_record(r) for r in await w.pull_records("G", topic, queue_id)]
        outcome["stored"] = stored
        outcome["taken"] = sum(taken)
        assert w.broker.context is not None
        latency = w.broker.context.stats.rpc_latency
        outcome["rpc"] = {key: sum(row[:-1]) for key, row in latency.items() if key[0] != RequestCode.PULL_MESSAGE}

    run_broker(tmp_path, scenario, max_message_size=MAX_MESSAGE, flush_disk_type=flush)
    return _Outcome(outcome["responses"], outcome["stored"], outcome.get("taken", 0), outcome["rpc"])


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_the_lane_answers_and_stores_as_the_python_path(tmp_path: Path, flush: FlushDiskType) -> None:
    native = _run(tmp_path / "native", lane_on=True, flush=flush)
    python = _run(tmp_path / "python", lane_on=False, flush=flush)
    assert native.responses == python.responses
    assert native.stored == python.stored
    native_stored, taken = native.stored, native.taken
    codes = {opaque: response[0] for opaque, response in native.responses.items()}
    assert all(codes[o] == ResponseCode.SUCCESS for o in (*range(1, 9), 24, 25, 27, 29)), codes
    assert codes[20] != ResponseCode.SUCCESS and codes[21] != ResponseCode.SUCCESS
    assert codes[22] == ResponseCode.SYSTEM_ERROR and codes[23] == ResponseCode.MESSAGE_ILLEGAL
    assert len(native_stored) >= 14
    assert taken >= sum(map(len, _frames()[:4])) + sum(map(len, _pulls()[:4])), "the lane served the leading ones"
    assert [codes[o] for o in range(100, 104)] == [ResponseCode.SUCCESS] * 4
    assert codes[104] == ResponseCode.PULL_NOT_FOUND and codes[105] == ResponseCode.TOPIC_NOT_EXIST


def test_another_send_processor_replaces_the_lane(tmp_path: Path) -> None:
    """A processor registered for SEND_MESSAGE_V2 later (a test's wrapper, say) serves every send."""

    async def scenario(w: Wire) -> None:
        server = w.broker.server
        assert server.lane is not None
        sends = {RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE}
        assert server.lane_codes == {*sends, RequestCode.PULL_MESSAGE}
        server.register(RequestCode.HEART_BEAT, server._processors[RequestCode.HEART_BEAT])
        assert server.lane is not None
        seen: list[int] = []
        real = server._processors[RequestCode.SEND_MESSAGE_V2]

        async def wrapper(request: RemotingCommand, connection: Any) -> RemotingCommand | None:
            seen.append(request.opaque)
            return await real(request, connection)

        server.register(RequestCode.SEND_MESSAGE_V2, wrapper)
        assert server.lane is None
        await w.send_ok("LaneA", b"x")
        responses = await one_write(w.broker.config.listen_port, [send_frame(41, topic="LaneA")])
        assert responses[41].code == ResponseCode.SUCCESS and 41 in seen

    run_broker(tmp_path, scenario)


def test_a_failing_lane_leaves_what_earlier_lanes_served(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The sends the send lane stored are not served again when the next lane raises: each is
    stored and answered once, and the pull after them is answered by the usual path."""

    async def scenario(w: Wire) -> None:
        server = w.broker.server
        assert isinstance(server.lane, Lanes)
        send_lane = server.lane._lanes[0]

        def broken(buffer: bytearray, position: int, connection: Any) -> int:
            raise RuntimeError("a lane bug")

        server.lane = Lanes(send_lane, broken)
        await w.send_ok("LaneA", b"create", queue_id=0)
        frames = [send_frame(51, topic="LaneA"), send_frame(52, topic="LaneA"), _pull(53)]
        responses = await one_write(w.broker.config.listen_port, frames)
        assert [responses[o].code for o in (51, 52, 53)] == [ResponseCode.SUCCESS] * 3
        assert [r.body for r in iter_records(responses[53].body)] == [b"create", b"body", b"body"]

    with caplog.at_level("ERROR"):
        run_broker(tmp_path, scenario)
    assert "a lane bug" in caplog.text


def _cpp_frames() -> list[bytes]:
    """The C++ client's SEND_MESSAGE frames: plain ones (signed with an empty AccessKey, as the
    client does without credentials), then shapes the lane leaves to the Python path, then plain again."""
    props = "KEYS\x01k{0} x\x02TAGS\x01TagA\x02UNIQ_KEY\x01C{0}\x02WAIT\x01true\x02color\x01red\x02"
    plain = [
        v1_frame(200 + i, cpp_fields(("LaneA", "LaneB")[i % 2], queueId=i % 3, properties=props.format(i)))
        for i in range(6)
    ]
    no_topic = {key: value for key, value in cpp_fields().items() if key != "topic"}
    batch = encode_batch_items([b"c1", b"c2"], [b"K\x01v", b""], [0, 0])
    return [
        *plain[:3],
        v1_frame(220, cpp_fields("LaneA", queueId="x")),  # a malformed header: its own error
        v1_frame(221, cpp_fields("LaneA", unitMode="yes")),
        v1_frame(222, cpp_fields("bad topic!")),
        v1_frame(223, cpp_fields("LaneA", queueId=9)),  # over the topic's queues
        v1_frame(224, cpp_fields("LaneA"), b"x" * (MAX_MESSAGE + 1)),
        v1_frame(225, cpp_fields("LaneNew")),  # created on send, by the Python path
        v1_frame(226, cpp_fields("LaneA", properties="DELAY\x012\x02WAIT\x01true\x02")),
        v1_frame(227, cpp_fields("LaneA", batch="1", properties="WAIT\x01true\x02"), batch),  # C++'s batch
        v1_frame(228, cpp_fields("LaneA"), top={"remark": "\x00"}),  # refused where decoded
        v1_frame(229, no_topic),
        v1_frame(230, cpp_fields("LaneB", queueId="+2", flag=-5, reconsumeTimes=None, bornTimestamp=-1)),
        v1_frame(231, cpp_fields("LaneA"), top={"remark": 5}),  # the lane leaves it, Python serves it
        *plain[3:],
        send_frame(232, topic="LaneB"),  # a V2 send after them: a group of its own
        v1_frame(233, cpp_fields("LaneA", sysFlag=4, properties="TRAN_MSG\x01true\x02UNIQ_KEY\x01TX\x02")),
    ]


def _both_ways(tmp_path: Path, flush: FlushDiskType, frames: list[bytes]) -> tuple[_Outcome, dict[int, int]]:
    """``frames`` in one write to a broker with the lane and to one without: the lane's outcome (the same
    answers, records and per-code statistics as without it) and its response codes by opaque."""
    native = _run(tmp_path / "native", lane_on=True, flush=flush, writes=[frames])
    python = _run(tmp_path / "python", lane_on=False, flush=flush, writes=[frames])
    assert native.responses == python.responses
    assert native.stored == python.stored
    assert native.rpc_counts == python.rpc_counts
    return native, {opaque: response[0] for opaque, response in native.responses.items()}


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_cpp_sends_are_answered_and_stored_as_the_python_path(tmp_path: Path, flush: FlushDiskType) -> None:
    """SEND_MESSAGE frames as the C++ client writes them, with the lane and without it (as under
    SPARKMQ_NATIVE=0): the same answers, records and per-code statistics; the lane served the plain ones."""
    frames = _cpp_frames()
    native, codes = _both_ways(tmp_path, flush, frames)
    succeeded = (*range(200, 206), 225, 226, 227, 230, 231, 232, 233)
    assert all(codes[o] == ResponseCode.SUCCESS for o in succeeded), codes
    assert all(codes[o] != ResponseCode.SUCCESS for o in (220, 221, 222, 223, 224, 228, 229)), codes
    assert native.rpc_counts[(RequestCode.SEND_MESSAGE, ResponseCode.SUCCESS)] == len(succeeded) - 1
    assert native.taken >= sum(map(len, frames[:3])) + sum(map(len, frames[-5:-2])), "the lane served the plain ones"


def _batch_frames() -> list[bytes]:
    """SEND_BATCH_MESSAGE frames as the Java client writes them: plain ones, then batches the lane leaves to
    the Python path (each its own answer), then plain ones again."""

    def items(n: int, tag: str = "T") -> list[tuple[bytes, bytes, int]]:
        props = "TAGS\x01{1}\x02KEYS\x01k{0} x\x02UNIQ_KEY\x01B{0}"
        return [(b"b%d" % i, props.format(i, tag).encode(), i) for i in range(n)]

    plain = [batch_frame(300 + i, items(i + 2), topic=("LaneA", "LaneB")[i % 2], queue_id=str(i % 3)) for i in range(6)]
    return [
        *plain[:3],
        batch_frame(320, items(2), queue_id="x"),  # a malformed header: its own error
        batch_frame(321, items(2), topic="bad topic!"),
        batch_frame(322, items(2), topic="LaneA", queue_id="9"),  # over the topic's queues
        batch_frame(323, [*items(2), (b"x" * MAX_MESSAGE, b"", 0)], topic="LaneA"),
        batch_frame(324, items(3), topic="LaneNew"),  # created on send, by the Python path
        batch_frame(325, items(2), topic="LaneA", properties="DELAY\x012"),  # refused: a batch is never delayed
        batch_frame(326, [*items(2), (b"d", b"DELAY\x012", 0)], topic="LaneB"),
        batch_frame(327, [], topic="LaneA"),  # no item
        send_frame(328, topic="LaneA", code=RequestCode.SEND_BATCH_MESSAGE, body=b"not a batch"),
        send_frame(
            329,
            topic="LaneB",
            code=RequestCode.SEND_BATCH_MESSAGE,
            sys_flag="1",
            extra={"m": "true"},
            body=zlib.compress(encode_batch_items([b"z1", b"z2"], [b"UNIQ_KEY\x01Z1", b""], [0, 0])),
        ),  # compressed: inflated by the Python path
        batch_frame(330, [(b"n1", b"", 0), (b"n2", b"", 0)], topic="LaneA", properties=None),  # no properties
        batch_frame(331, items(2), topic="LaneB", properties="WAIT\x01false\x02"),
        *plain[3:],
        send_frame(332, topic="LaneB"),  # a single send after them: a group of its own
    ]


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_batches_are_answered_and_stored_as_the_python_path(tmp_path: Path, flush: FlushDiskType) -> None:
    """The Java client's batches with the lane and without it (as under SPARKMQ_NATIVE=0): the same answers
    (every record's msgId, the first queue offset), records and per-code statistics; the lane served the plain
    ones."""
    frames = _batch_frames()
    native, codes = _both_ways(tmp_path, flush, frames)
    succeeded = (*range(300, 306), 324, 326, 329, 330, 331, 332)
    assert all(codes[o] == ResponseCode.SUCCESS for o in succeeded), codes
    assert all(codes[o] != ResponseCode.SUCCESS for o in (320, 321, 322, 323, 325, 327, 328)), codes
    assert native.rpc_counts[(RequestCode.SEND_BATCH_MESSAGE, ResponseCode.SUCCESS)] == len(succeeded) - 1
    assert len(native.responses[305][3]) == 7, "a batch's answer names each of its records"
    assert native.taken >= sum(map(len, frames[:3])) + sum(map(len, frames[-4:-1])), "the lane served the plain ones"


def _batch_past_flush_timeout(tmp_path: Path, lane_on: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """A batch sent while the disk stalls past syncFlushTimeout (SYNC flush): its answer; whether the lane took it."""
    stall, outcome = StalledSync(), {}

    async def scenario(w: Wire) -> None:
        counted, taken = counted_lane(w.broker.server.lane)
        w.broker.server.lane = counted if lane_on else None
        await w.send_ok("LaneA", b"create", queue_id=0)
        monkeypatch.setattr(disk, "fdatasync", stall)
        items = [(b"s%d" % i, b"UNIQ_KEY\x01S%d" % i, 0) for i in range(3)]
        response = (await one_write(w.broker.config.listen_port, [batch_frame(7, items, topic="LaneA")]))[7]
        stall.release.set()
        monkeypatch.undo()
        outcome["answer"] = (_comparable(response), sum(taken) > 0)

    try:
        run_broker(tmp_path, scenario, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200)
    finally:
        stall.release.set()
    return outcome["answer"]


def test_a_batch_past_the_flush_timeout_is_answered_as_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    native, lane_took = _batch_past_flush_timeout(tmp_path / "native", True, monkeypatch)
    python, _ = _batch_past_flush_timeout(tmp_path / "python", False, monkeypatch)
    assert lane_took and native == python
    assert native[0] == ResponseCode.FLUSH_DISK_TIMEOUT and len(native[3]) == 3, native


def test_with_an_authorizer_every_cpp_send_is_checked_by_it(tmp_path: Path) -> None:
    """ACL on: the lane stands aside, so a signed C++ send meets the authorizer (here, one refusing all)."""

    async def scenario(w: Wire) -> None:
        server = w.broker.server
        counted, taken = counted_lane(server.lane)

        await w.send_ok("LaneA", b"create", queue_id=0)
        server.lane = counted
        seen: list[int] = []

        def refuse(request: RemotingCommand, connection: Any) -> RemotingCommand:
            seen.append(request.opaque)
            return request.make_response(ResponseCode.NO_PERMISSION, remark="refused by the test")

        server.authorize = refuse
        responses = await one_write(w.broker.config.listen_port, [v1_frame(61, cpp_fields("LaneA"))])
        assert (responses[61].code, responses[61].remark) == (ResponseCode.NO_PERMISSION, "refused by the test")
        assert seen == [61] and sum(taken) == 0

    run_broker(tmp_path, scenario)


def test_an_authorizer_set_later_sees_the_sends_of_connections_already_open(tmp_path: Path) -> None:
    """Connections call their lanes directly (no server step per read): setting an authorizer
    takes the lanes from the connections already open, so it sees their next send, and clearing
    it gives the lanes back."""

    async def scenario(w: Wire) -> None:
        server = w.broker.server
        counted, taken = counted_lane(server.lane)
        server.lane = counted
        await w.send_ok("LaneA", b"create", queue_id=0)
        taken.clear()
        await w.send_ok("LaneA", b"by the lane", queue_id=0)  # the same connection, open all along
        assert sum(taken) > 0
        seen: list[str] = []

        def refuse(request: RemotingCommand, connection: Any) -> RemotingCommand:
            seen.append(request.ext_fields["b"])
            return request.make_response(ResponseCode.NO_PERMISSION, remark="refused by the test")

        server.authorize = refuse
        taken.clear()
        response = await w.send("LaneA", b"refused", queue_id=0)
        assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "refused by the test")
        assert seen == ["LaneA"] and sum(taken) == 0
        server.authorize = None
        await w.send_ok("LaneA", b"by the lane again", queue_id=0)
        assert seen == ["LaneA"] and sum(taken) > 0
        bodies = [r.body for r in await w.pull_records("G", "LaneA", 0)]
        assert bodies == [b"create", b"by the lane", b"by the lane again"]

    run_broker(tmp_path, scenario)


def test_the_lane_sees_a_topic_change_at_once(tmp_path: Path) -> None:
    """The lane remembers each topic's checks; a changed permission or queue count is honoured on the
    next read (the usual path answers what the lane no longer takes)."""

    async def scenario(w: Wire) -> None:
        server, topics = w.broker.server, w.broker.context.topics
        counted, taken = counted_lane(server.lane)

        server.lane = counted
        await w.send_ok("LaneP", b"create", queue_id=0)

        async def send(opaque: int, queue_id: str) -> int:
            taken.clear()
            responses = await one_write(
                w.broker.config.listen_port, [send_frame(opaque, topic="LaneP", queue_id=queue_id)]
            )
            return responses[opaque].code

        assert await send(1, "1") == ResponseCode.SUCCESS and sum(taken) > 0
        topics.update_by_admin(TopicConfig("LaneP", 4, 4, int(PermName.PERM_READ)))
        assert await send(2, "1") == ResponseCode.NO_PERMISSION and sum(taken) == 0
        topics.update_by_admin(TopicConfig("LaneP", 8, 8, int(PermName.PERM_READ | PermName.PERM_WRITE)))
        assert await send(3, "6") == ResponseCode.SUCCESS and sum(taken) > 0
        topics.delete("LaneP")
        assert await send(4, "1") != ResponseCode.SUCCESS or topics.get("LaneP") is not None
        assert sum(taken) == 0

    run_broker(tmp_path, scenario)
