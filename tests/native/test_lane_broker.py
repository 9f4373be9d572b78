"""A broker answers the same reads the same way with its native send lane and without it.

The same frames (plain sends on two topics among refusals, malformed headers, a delayed
message, a batch, a pull) go to a fresh broker twice, as one socket write each time: once with
the lane (``RemotingServer.lane``), once with it off, as under ``SPARKMQ_NATIVE=0``. The
responses (codes, remarks, queue ids and offsets, the msgIds' log positions) and the stored
records must agree, and the lane must have served the plain sends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkmq import native
from sparkmq.broker.processors.lanes import Lanes
from sparkmq.message.batch import encode_batch_items
from sparkmq.message.msgid import decode_offset_msg_id
from sparkmq.message.record import StoredMessage, iter_records
from sparkmq.protocol import PermName, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.namesrv_bodies import TopicConfig
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, one_write, run_broker
from support.native_lane import send_frame

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


def _run(
    tmp_path: Path, lane_on: bool, flush: FlushDiskType
) -> tuple[dict[int, tuple[Any, ...]], list[tuple[Any, ...]], int]:
    outcome: dict[str, Any] = {}

    async def scenario(w: Wire) -> None:
        server = w.broker.server
        assert server.lane is not None, "the lane was built"
        lane = server.lane
        taken: list[int] = []

        def counted(buffer: bytearray, position: int, connection: Any) -> int:
            end = lane(buffer, position, connection)
            taken.append(end - position)
            return end

        server.lane = counted if lane_on else None
        for topic in ("LaneA", "LaneB"):
            await w.send_ok(topic, b"create", queue_id=0)
        responses = await one_write(w.broker.config.listen_port, _frames())
        responses.update(await one_write(w.broker.config.listen_port, _pulls()))
        outcome["responses"] = {opaque: _comparable(r) for opaque, r in responses.items()}
        stored = []
        for topic in ("LaneA", "LaneB", "LaneNew", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"):
            for queue_id in range(4):
                stored += [_record(r) for r in await w.pull_records("G", topic, queue_id)]
        outcome["stored"] = stored
        outcome["taken"] = sum(taken)

    run_broker(tmp_path, scenario, max_message_size=MAX_MESSAGE, flush_disk_type=flush)
    return outcome["responses"], outcome["stored"], outcome.get("taken", 0)


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_the_lane_answers_and_stores_as_the_python_path(tmp_path: Path, flush: FlushDiskType) -> None:
    native_responses, native_stored, taken = _run(tmp_path / "native", lane_on=True, flush=flush)
    python_responses, python_stored, _ = _run(tmp_path / "python", lane_on=False, flush=flush)
    assert native_responses == python_responses
    assert native_stored == python_stored
    codes = {opaque: response[0] for opaque, response in native_responses.items()}
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
        assert server.lane_codes == {RequestCode.SEND_MESSAGE_V2, RequestCode.PULL_MESSAGE}
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


def test_the_lane_sees_a_topic_change_at_once(tmp_path: Path) -> None:
    """The lane remembers each topic's checks; a changed permission or queue count is honoured on the
    next read (the usual path answers what the lane no longer takes)."""

    async def scenario(w: Wire) -> None:
        server, topics = w.broker.server, w.broker.context.topics
        lane, taken = server.lane, []

        def counted(buffer: bytearray, position: int, connection: Any) -> int:
            end = lane(buffer, position, connection)
            taken.append(end - position)
            return end

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
