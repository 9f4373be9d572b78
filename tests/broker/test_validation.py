"""Issue 15: bad input on the wire gets a precise answer and the broker keeps serving.

Every test talks to a real in-process broker over real frames (``support.broker_wire``) and
ends by sending and pulling a message, to show the broker still serves.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkmq.broker.config import FRAME_HEADER_RESERVE_BYTES, MAX_MESSAGE_SIZE_LIMIT, BrokerConfig, parse_properties
from sparkmq.errors import ConfigError
from sparkmq.protocol import MAX_FRAME_BYTES, RequestCode, ResponseCode
from sparkmq.protocol.namesrv_bodies import TopicConfigSerializeWrapper
from support.broker_wire import Wire, run_broker

B = RequestCode
CREATE = {
    "defaultTopic": "TBW102",
    "readQueueNums": "4",
    "writeQueueNums": "4",
    "perm": "6",
    "topicFilterType": "SINGLE_TAG",
    "topicSysFlag": "0",
    "order": "false",
}


async def still_serving(w: Wire, topic: str = "StillServing") -> None:
    await w.send_ok(topic, b"alive")
    assert [bytes(r.body) for r in await w.pull_records("CID_ALIVE", topic, 0)] == [b"alive"]


async def topic_table(w: Wire) -> dict[str, Any]:
    response = await w.call(B.GET_ALL_TOPIC_CONFIG)
    assert response.code == ResponseCode.SUCCESS, response
    return TopicConfigSerializeWrapper.decode(response.body).topic_config_table


def test_delete_topic_refuses_paths_and_system_topics(tmp_path: Path) -> None:
    outside = tmp_path / "unrelated"
    (outside / "0").mkdir(parents=True)
    (outside / "0" / "keep").write_bytes(b"precious")

    async def scenario(w: Wire) -> None:
        for name in (str(outside), "../unrelated", "..", ".", "", "a/b", "Nope\ud800", "x" * 128):
            response = await w.raw(B.DELETE_TOPIC_IN_BROKER, {"topic": name})
            assert response.code == ResponseCode.SYSTEM_ERROR, (name, response)
            # a lone surrogate is refused at the edge, before any processor sees the request
            expected = "lone surrogate" if "\ud800" in name else "The specified topic"
            assert expected in (response.remark or ""), response.remark
        for system in ("TBW102", "SCHEDULE_TOPIC_XXXX", "SELF_TEST_TOPIC", "DefaultCluster", "broker-a", "rmq_sys_x"):
            response = await w.call(B.DELETE_TOPIC_IN_BROKER, {"topic": system})
            assert (response.code, response.remark) == (
                ResponseCode.SYSTEM_ERROR,
                f"The topic[{system}] is conflict with system topic.",
            )
        assert {"TBW102", "SCHEDULE_TOPIC_XXXX"} <= set(await topic_table(w))
        await still_serving(w)

    run_broker(tmp_path / "store", scenario)
    assert (outside / "0" / "keep").read_bytes() == b"precious"


@pytest.mark.parametrize(
    ("field", "value", "remark"),
    [
        ("readQueueNums", "1000000", "readQueueNums 1000000 of topic[Bad] is outside 1..1024 (maxTopicQueueNums)"),
        ("writeQueueNums", "0", "writeQueueNums 0 of topic[Bad] is outside 1..1024 (maxTopicQueueNums)"),
        (
            "writeQueueNums",
            "2147483647",
            "writeQueueNums 2147483647 of topic[Bad] is outside 1..1024 (maxTopicQueueNums)",
        ),
        ("perm", "99", "perm 99 of topic[Bad] is not a combination of PermName bits (0..15)"),
        ("topicSysFlag", "9", "topicSysFlag 9 of topic[Bad] is not a combination of TopicSysFlag bits (0..3)"),
        (
            "topicFilterType",
            "\ud800",
            "header field 'topicFilterType' holds a lone surrogate U+D800 at index 0",
        ),  # the edge
        ("topicFilterType", "SQL92", "topicFilterType 'SQL92' of topic[Bad] is not one of MULTI_TAG, SINGLE_TAG"),
    ],
)
def test_create_topic_refuses_out_of_range_settings(tmp_path: Path, field: str, value: str, remark: str) -> None:
    async def scenario(w: Wire) -> None:
        response = await w.raw(B.UPDATE_AND_CREATE_TOPIC, {**CREATE, "topic": "Bad", field: value})
        assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, remark)
        assert "Bad" not in await topic_table(w)  # GET_ALL_TOPIC_CONFIG (and topics.json) stay encodable
        await still_serving(w)

    run_broker(tmp_path, scenario)


def test_tbw102_cannot_be_emptied_and_auto_create_keeps_working(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        response = await w.call(
            B.UPDATE_AND_CREATE_TOPIC,
            {**CREATE, "topic": "TBW102", "defaultTopic": "X", "readQueueNums": "0", "writeQueueNums": "0"},
        )
        assert (response.code, response.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The topic[TBW102] is conflict with system topic.",
        )
        assert (await topic_table(w))["TBW102"].write_queue_nums == 8
        await still_serving(w, "AutoCreatedAfterwards")

    run_broker(tmp_path, scenario)


def test_a_topic_without_writable_queues_answers_a_send_to_any_queue(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    table = {
        "dataVersion": {"counter": 1, "timestamp": 1},
        "topicConfigTable": {
            "Drained": {
                "order": False,
                "perm": 6,
                "readQueueNums": 1,
                "topicFilterType": "SINGLE_TAG",
                "topicName": "Drained",
                "topicSysFlag": 0,
                "writeQueueNums": 0,
            }
        },
    }
    (config / "topics.json").write_text(json.dumps(table))

    async def scenario(w: Wire) -> None:
        response = await w.send("Drained", b"m", queue_id=-1)
        assert (response.code, response.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "topic[Drained] has no writable queue: writeQueueNums is 0",
        )
        await still_serving(w)

    run_broker(tmp_path, scenario)


def test_bad_group_and_topic_names_are_answered_on_every_path(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok("Named", b"m")
        bad_group = {"consumerGroup": "bad group", "topic": "Named", "queueId": "0"}
        for code, fields in (
            (B.UPDATE_CONSUMER_OFFSET, {**bad_group, "commitOffset": "1"}),
            (B.QUERY_CONSUMER_OFFSET, bad_group),
            (B.GET_CONSUMER_LIST_BY_GROUP, bad_group),
            (B.GET_CONSUME_STATS, bad_group),
        ):
            response = await w.call(code, fields)
            assert response.code == ResponseCode.SYSTEM_ERROR, (code, response)
            assert "The specified group['bad group'] contains illegal characters" in (response.remark or ""), response
        pulled = await w.pull("bad/group", "Named", 0, 0)
        assert pulled.code == ResponseCode.SYSTEM_ERROR and "group" in (pulled.remark or "")
        for code in (B.GET_MAX_OFFSET, B.GET_MIN_OFFSET, B.GET_EARLIEST_MSG_STORETIME, B.GET_TOPIC_STATS_INFO):
            response = await w.raw(code, {"topic": "/etc", "queueId": "0"})
            assert response.code == ResponseCode.SYSTEM_ERROR, (code, response)
            assert "The specified topic['/etc'] contains illegal characters" in (response.remark or "")
        pull_fields = {
            "consumerGroup": "CID",
            "topic": "Nope\ud800",
            "queueId": "0",
            "queueOffset": "0",
            "maxMsgNums": "1",
            "sysFlag": "0",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subVersion": "0",
        }
        surrogate = await w.raw(B.PULL_MESSAGE, pull_fields)  # answered, never an unencodable remark
        assert surrogate.code == ResponseCode.SYSTEM_ERROR and "lone surrogate" in (surrogate.remark or ""), surrogate
        beat = await w.heartbeat("c1", "bad.group", {"Named": "*"})
        assert beat.code == ResponseCode.SYSTEM_ERROR and "bad.group" in (beat.remark or "")
        await still_serving(w)

    run_broker(tmp_path, scenario)


def test_auto_created_groups_are_bounded(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok("Grouped", b"m")
        for i in range(3):
            assert (await w.heartbeat(f"c{i}", f"CID_{i}", {"Grouped": "*"})).code == ResponseCode.SUCCESS
        beyond = await w.heartbeat("c3", "CID_3", {"Grouped": "*"})
        remark = (
            "subscription group [CID_3] does not exist and the broker already holds 3 groups "
            "(maxSubscriptionGroupNums=3)"
        )
        assert (beyond.code, beyond.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark)
        pulled = await w.pull("CID_4", "Grouped", 0, 0)
        assert (
            pulled.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "maxSubscriptionGroupNums=3" in pulled.remark
        )
        assert len(await w.pull_records("CID_1", "Grouped", 0)) == 1  # known groups keep working
        assert "%RETRY%CID_3" not in await topic_table(w)

    run_broker(tmp_path, scenario, max_subscription_group_nums=3)


def test_pulls_naming_5000_new_groups_write_the_group_table_off_the_loop_in_few_batches(tmp_path: Path) -> None:
    writes: list[str] = []

    async def scenario(w: Wire) -> None:
        await w.send_ok("ManyGroups", b"m")
        table = w.broker.persister._tables["subscriptionGroup.json"]
        real_write = table.write

        def counting_write(snapshot: Any) -> None:
            writes.append(threading.current_thread().name)
            real_write(snapshot)

        table.write = counting_write
        for start in range(0, 5000, 500):
            responses = [w.pull(f"CID_{i}", "ManyGroups", 0, 0) for i in range(start, start + 500)]
            for response in [await r for r in responses]:
                assert response.code == ResponseCode.SUCCESS
        assert await w.broker.persister.persist_changed() == []
        groups = json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
        assert {f"CID_{i}" for i in range(5000)} <= set(groups)

    run_broker(tmp_path, scenario)
    assert 1 <= len(writes) < 50, len(writes)  # batched: never one write per new group
    assert threading.main_thread().name not in writes  # the loop (main thread here) never writes


def test_max_message_size_must_fit_a_frame() -> None:
    with pytest.raises(ConfigError) as raised:
        BrokerConfig.from_properties(parse_properties(f"maxMessageSize={MAX_FRAME_BYTES}\n"))
    assert str(MAX_FRAME_BYTES) in raised.value.remark and str(MAX_MESSAGE_SIZE_LIMIT) in raised.value.remark
    with pytest.raises(ConfigError):
        BrokerConfig(max_message_size=MAX_MESSAGE_SIZE_LIMIT + 1)
    assert (
        BrokerConfig(max_message_size=MAX_MESSAGE_SIZE_LIMIT).max_message_size
        == MAX_FRAME_BYTES - FRAME_HEADER_RESERVE_BYTES
    )


def test_the_largest_allowed_message_is_pulled_in_one_frame(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        record_overhead = 4 * 1024  # fixed fields, topic and properties of this record
        body = bytes(range(256)) * ((MAX_MESSAGE_SIZE_LIMIT - record_overhead) // 256)
        await w.send_ok("Huge", body)
        too_big = await w.send("Huge", body + bytes(record_overhead))
        assert too_big.code == ResponseCode.MESSAGE_ILLEGAL, too_big
        (record,) = await w.pull_records("CID_HUGE", "Huge", 0, timeout=30)
        assert bytes(record.body) == body

    run_broker(tmp_path, scenario, max_message_size=MAX_MESSAGE_SIZE_LIMIT, mapped_file_size_commit_log=64 << 20)
