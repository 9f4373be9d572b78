"""A broker answers pulls with its native pull lane byte for byte as its Python path does.

One broker holds messages with and without tags on three queues, and a consumer group whose
heartbeat subscribed by tag; hypothesis-generated pulls (groups, queues, offsets, batch sizes,
sysFlags with and without the pull's own subscription, commit offsets, tag and SQL92 expressions,
bad ones too) go to it as one socket write with the lane on, then the same write with it off (as
under ``SPARKMQ_NATIVE=0``). Every response frame must be the same bytes; pulls are reads, and a
repeated offset commit writes the same value, so the two runs see the same state.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq import native
from sparkmq.broker.subscriptions import SubscriptionGroupConfig
from sparkmq.message.record import iter_records
from sparkmq.protocol import PermName, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.frame import decode_frame
from support.broker_wire import Wire, counted_lane, run_broker

pytestmark = pytest.mark.skipif(native.sendlane is None, reason="native lane off or not built")

TOPIC = "PullLane"
TAGS = (None, "TagA", "TagB")


@st.composite
def pulls(draw: st.DrawFn) -> dict[str, str]:
    fields = {
        "consumerGroup": draw(st.sampled_from(["CID_OWN", "CID_HB", "bad group!"])),
        "topic": draw(st.sampled_from([TOPIC, TOPIC, TOPIC, "PullLaneNope"])),
        "queueId": str(draw(st.integers(0, 5))),
        "queueOffset": str(draw(st.integers(0, 40))),
        "maxMsgNums": str(draw(st.integers(1, 40))),
        "sysFlag": str(draw(st.sampled_from([0, 1, 4, 5]))),
        "commitOffset": str(draw(st.integers(-1, 30))),
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
    }
    if draw(st.booleans()):
        expression = draw(st.sampled_from(["*", "TagA", "TagA || TagB", "Nope", "", "a > 1"]))
        fields["subscription"] = expression
        fields["expressionType"] = draw(st.sampled_from(["TAG", "SQL92"] if expression == "a > 1" else ["TAG"]))
    if draw(st.booleans()):  # as the Java client 4.9.5+ writes them
        fields.update(bname="broker-a", ReqT="0")
    return fields


async def _raw_answers(port: int, frames: list[bytes]) -> dict[int, bytes]:
    """Write ``frames`` in one write; each response frame's bytes, by opaque."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(frames))
        answers: dict[int, bytes] = {}
        while len(answers) < len(frames):
            length = int.from_bytes(await reader.readexactly(4))
            frame = length.to_bytes(4) + await reader.readexactly(length)
            answers[decode_frame(frame).opaque] = frame
        return answers
    finally:
        writer.close()
        await writer.wait_closed()


async def _lane_and_python_answers(w: Wire, frames: list[bytes]) -> dict[str, Any]:
    """The broker's answers to ``frames`` with its lane (counting what it took), then without it."""
    server = w.broker.server
    counted, taken = counted_lane(server.lane)
    port = w.broker.config.listen_port
    server.lane = counted
    native = await _raw_answers(port, frames)
    server.lane = None
    python = await _raw_answers(port, frames)
    return {"native": native, "python": python, "taken": sum(taken)}


@settings(max_examples=15, deadline=None)
@given(st.lists(pulls(), min_size=1, max_size=30))
def test_lane_answers_are_the_python_paths_bytes(tmp_path_factory: pytest.TempPathFactory, drawn: list[Any]) -> None:
    lead = {**drawn[0], "consumerGroup": "CID_OWN", "topic": TOPIC, "queueId": "0", "queueOffset": "0"}
    lead.update(sysFlag="4", subscription="*", expressionType="TAG")  # one the lane surely takes
    frames = [
        RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque, ext_fields=fields).encode()
        for opaque, fields in enumerate([lead, *drawn], start=1)
    ]
    outcome: dict[str, Any] = {}

    async def scenario(w: Wire) -> None:
        for i in range(60):
            tag = TAGS[i % 3]
            await w.send_ok(TOPIC, bytes([65 + i % 26]) * (10 + i), queue_id=i % 3, props={"TAGS": tag} if tag else {})
        assert (await w.heartbeat("hb-client", "CID_HB", {TOPIC: "TagA"})).code == ResponseCode.SUCCESS
        outcome.update(await _lane_and_python_answers(w, frames))

    run_broker(tmp_path_factory.mktemp("pull-lane"), scenario)
    assert outcome["native"] == outcome["python"]
    assert outcome["taken"] >= len(frames[0]), "the lane served the leading pull"


def test_cached_checks_follow_heartbeats_groups_and_topics(tmp_path: Path) -> None:
    """The lane's cached checks give way when the heartbeat's subscription, the group or the topic
    changes: the next pull is answered by the new state."""

    def pull(opaque: int, group: str, **extra: str) -> bytes:
        fields = {"consumerGroup": group, "topic": TOPIC, "queueId": "0", "queueOffset": "0", "maxMsgNums": "8"}
        fields.update(sysFlag="0", commitOffset="0", suspendTimeoutMillis="0", subVersion="0", **extra)
        return RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque, ext_fields=fields).encode()

    def tags_of(answer: bytes) -> set[str]:
        response = decode_frame(answer)
        assert response.code == ResponseCode.SUCCESS, response
        return {r.properties.get("TAGS", "") for r in iter_records(response.body)}

    async def scenario(w: Wire) -> None:
        for i in range(12):
            await w.send_ok(TOPIC, b"m", queue_id=0, props={"TAGS": ("TagA", "TagB")[i % 2]})
        ctx, port = w.broker.context, w.broker.config.listen_port
        assert ctx is not None and w.broker.server.lane is not None
        await w.heartbeat("hb-client", "CID_HB", {TOPIC: "TagA"})
        assert tags_of((await _raw_answers(port, [pull(1, "CID_HB")]))[1]) == {"TagA"}
        await w.heartbeat("hb-client", "CID_HB", {TOPIC: "TagB"})
        assert tags_of((await _raw_answers(port, [pull(2, "CID_HB")]))[2]) == {"TagB"}

        assert tags_of((await _raw_answers(port, [pull(3, "CID_G")]))[3]) == {"TagA", "TagB"}
        ctx.groups.update(SubscriptionGroupConfig("CID_G", consume_enable=False))
        assert decode_frame((await _raw_answers(port, [pull(4, "CID_G")]))[4]).code == ResponseCode.NO_PERMISSION

        topic = ctx.topics.get(TOPIC)
        assert topic is not None
        ctx.topics.put(dataclasses.replace(topic, perm=int(PermName.PERM_WRITE)))
        refused = decode_frame((await _raw_answers(port, [pull(5, "CID_HB")]))[5])
        assert refused.code == ResponseCode.NO_PERMISSION

    run_broker(tmp_path, scenario)


@settings(max_examples=10, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2), st.integers(0, 40), st.integers(20, 32), st.sampled_from(["*", "TagA", "TagA || TagB"])
        ),
        min_size=1,
        max_size=12,
    )
)
def test_the_lane_serves_pulls_across_commitlog_segments(
    tmp_path_factory: pytest.TempPathFactory, drawn: list[tuple[int, int, int, str]]
) -> None:
    """With 16 KiB CommitLog segments every pull here spans two or more of them (20+ records of
    ~370 B from one of three interleaved queues): the lane serves each one (one buffer for the
    read's answers) with the Python path's very bytes."""
    frames = []
    for opaque, (queue_id, offset, count, expression) in enumerate(drawn, start=1):
        fields = {"consumerGroup": "CID_OWN", "topic": TOPIC, "queueId": str(queue_id), "queueOffset": str(offset)}
        fields.update(maxMsgNums=str(count), sysFlag="4", commitOffset="-1", suspendTimeoutMillis="0", subVersion="0")
        fields.update(subscription=expression, expressionType="TAG")
        frames.append(RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque, ext_fields=fields).encode())
    outcome: dict[str, Any] = {}

    async def scenario(w: Wire) -> None:
        for i in range(240):
            await w.send_ok(TOPIC, bytes([65 + i % 26]) * 300, queue_id=i % 3, props={"TAGS": ("TagA", "TagB")[i % 2]})
        outcome.update(await _lane_and_python_answers(w, frames))

    run_broker(tmp_path_factory.mktemp("pull-lane-segments"), scenario, mapped_file_size_commit_log=16 * 1024)
    assert outcome["native"] == outcome["python"]
    assert all(decode_frame(answer).code == ResponseCode.SUCCESS for answer in outcome["python"].values())
    assert outcome["taken"] == sum(len(frame) for frame in frames), "the lane served every pull"
