"""Broker processors over real frames: send (10/310/320, C++ batches), pull, offsets, lookups, admin.

Each test starts an in-process BrokerController on a free loopback port with a small-segment
store in ``tmp_path`` and talks to it through RemotingClient (``support.broker_wire``).
Consumer-side commands (heartbeat, notify, locks, send-back, delay, restart) are in
``test_processors_consumers.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from pathlib import Path

from sparkmq.message.batch import encode_batch_items
from sparkmq.message.msgid import decode_offset_msg_id
from sparkmq.message.properties import decode_properties, encode_properties
from sparkmq.message.record import iter_records
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_bodies import ConsumeStats, TopicStatsTable
from sparkmq.protocol.bodies import KVTable, MessageQueue
from sparkmq.protocol.namesrv_bodies import TopicConfigSerializeWrapper
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, run_broker

B = RequestCode


def assert_string_fields(fields: dict[str, str]) -> None:
    """C++ 1.2.3 reads only JSON strings in response headers."""
    assert fields and all(isinstance(v, str) for v in fields.values()), fields


# --- send ------------------------------------------------------------------------------------


def test_send_message_v1_as_cpp_sends_it(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        props = "KEYS\x01KEY1 KEY2\x02TAGS\x01TagA\x02UNIQ_KEY\x01ABC\x02WAIT\x01true\x02myprop\x01v1\x02"
        fields = {
            "batch": "0",
            "bornTimestamp": "1795237221692",
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "flag": 7,
            "producerGroup": "PID_TEST",
            "properties": props,
            "queueId": 1,
            "reconsumeTimes": "0",
            "sysFlag": 0,
            "topic": "TopicTest",
            "unitMode": "0",
        }
        response = await w.raw(B.SEND_MESSAGE, fields, b"hello cpp")
        assert response.code == ResponseCode.SUCCESS, response
        assert_string_fields(response.ext_fields)
        assert (response.ext_fields["queueId"], response.ext_fields["queueOffset"]) == ("1", "0")
        host, port, offset = decode_offset_msg_id(response.ext_fields["msgId"])
        assert (host, port) == ("127.0.0.1", w.broker.config.listen_port)
        viewed = await w.call(B.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
        assert viewed.code == ResponseCode.SUCCESS
        (record,) = iter_records(viewed.body, check_crc=True)
        assert (record.topic, record.queue_id, record.flag, bytes(record.body)) == ("TopicTest", 1, 7, b"hello cpp")
        assert record.born_timestamp == 1795237221692 and record.physical_offset == offset
        assert record.properties["myprop"] == "v1" and record.properties["KEYS"] == "KEY1 KEY2"
        missing = await w.call(B.VIEW_MESSAGE_BY_ID, {"offset": str(offset + 10_000)})
        assert missing.code == ResponseCode.SYSTEM_ERROR and "can not find message" in (missing.remark or "")
        for inside in range(offset + 1, offset + len(viewed.body)):  # forged ids: every offset mid-record
            answer = await w.call(B.VIEW_MESSAGE_BY_ID, {"offset": str(inside)})
            assert answer.code == ResponseCode.SYSTEM_ERROR and "can not find message" in (answer.remark or ""), inside

    run_broker(tmp_path, scenario)


def test_send_message_v2_as_ali_ons_sends_it_and_pull_it_back(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        fields = {
            "a": "PID_ONS",
            "b": "TopicTest",
            "c": "TBW102",
            "d": 4,
            "e": 3,
            "f": 0,
            "g": 1795237382586,
            "h": 0,
            "i": "TAGS\x01TagA\x02KEYS\x01K1 K2\x02",
            "j": 0,
            "k": False,
        }
        response = await w.raw(B.SEND_MESSAGE_V2, fields, b"hello ons")
        assert response.code == ResponseCode.SUCCESS, response
        assert_string_fields(response.ext_fields)
        assert response.ext_fields["queueId"] == "3"
        pulled = await w.pull("CID", "TopicTest", 3, 0)
        assert pulled.code == ResponseCode.SUCCESS
        assert_string_fields(pulled.ext_fields)
        assert {
            k: pulled.ext_fields[k] for k in ("nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId")
        } == {"nextBeginOffset": "1", "minOffset": "0", "maxOffset": "1", "suggestWhichBrokerId": "0"}
        (record,) = iter_records(pulled.body, check_crc=True)
        assert bytes(record.body) == b"hello ons" and record.properties["TAGS"] == "TagA"

    run_broker(tmp_path, scenario)


def test_send_batch_message_stores_one_record_per_item(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        items = encode_batch_items(
            [b"one", b"two", b"three"],
            [encode_properties({"TAGS": f"T{i}", "UNIQ_KEY": f"U{i}"}) for i in range(3)],
            [1, 2, 3],
        )
        fields = {
            "a": "PID",
            "b": "Batched",
            "c": "TBW102",
            "d": "4",
            "e": "2",
            "f": "0",
            "g": "1",
            "h": "0",
            "i": encode_properties({"WAIT": "true", "batchprop": "yes"}).decode(),
            "m": "true",
        }
        first = await w.call(B.SEND_BATCH_MESSAGE, fields, items)
        second = await w.call(B.SEND_BATCH_MESSAGE, fields, items)
        for response in (first, second):
            assert response.code == ResponseCode.SUCCESS, response
            assert_string_fields(response.ext_fields)
        ids = first.ext_fields["msgId"].split(",")
        assert len(ids) == 3 and len(set(ids)) == 3
        assert (first.ext_fields["queueOffset"], second.ext_fields["queueOffset"]) == ("0", "3")
        records = await w.pull_records("CID", "Batched", 2, 0)
        assert [bytes(r.body) for r in records] == [b"one", b"two", b"three"] * 2
        assert [r.queue_offset for r in records] == list(range(6))
        assert [r.flag for r in records[:3]] == [1, 2, 3]
        assert [r.offset_msg_id for r in records[:3]] == ids
        for i, record in enumerate(records[:3]):
            props = record.properties
            assert (props["TAGS"], props["UNIQ_KEY"], props["batchprop"]) == (f"T{i}", f"U{i}", "yes")

    run_broker(tmp_path, scenario)


def test_cpp_batch_is_code_10_with_batch_1_and_a_compressed_body(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        bodies = [b"x" * 300, b"y" * 300]
        items = encode_batch_items(bodies, [encode_properties({"TAGS": "A"}), encode_properties({"TAGS": "B"})])
        fields = {
            "batch": "1",
            "bornTimestamp": "1",
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "flag": 0,
            "producerGroup": "PID",
            "properties": "",
            "queueId": 0,
            "reconsumeTimes": "0",
            "sysFlag": 1,
            "topic": "CppBatch",
            "unitMode": "0",
        }
        response = await w.raw(B.SEND_MESSAGE, fields, zlib.compress(items))
        assert response.code == ResponseCode.SUCCESS, response
        assert len(response.ext_fields["msgId"].split(",")) == 2
        records = await w.pull_records("CID", "CppBatch", 0, 0)
        assert [bytes(r.body) for r in records] == bodies
        assert [r.properties["TAGS"] for r in records] == ["A", "B"]
        assert all(r.sys_flag & 1 == 0 for r in records)  # the items themselves are not compressed
        broken = await w.raw(B.SEND_MESSAGE, fields, b"not zlib at all")
        assert broken.code == ResponseCode.MESSAGE_ILLEGAL

    run_broker(tmp_path, scenario)


def test_batches_refuse_a_delay_level(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        items = encode_batch_items([b"a", b"b"], [b"", b""])
        fields = {
            "a": "PID",
            "b": "NoDelay",
            "c": "TBW102",
            "d": "4",
            "e": "0",
            "f": "0",
            "g": "1",
            "h": "0",
            "i": encode_properties({"DELAY": "2"}).decode(),
            "m": "true",
        }
        for body in (items, encode_batch_items([b"a"], [b""])):
            response = await w.call(B.SEND_BATCH_MESSAGE, fields, body)
            assert response.code == ResponseCode.MESSAGE_ILLEGAL, response  # CommitLog.asyncPutMessages
        assert (await w.offset(B.GET_MAX_OFFSET, "SCHEDULE_TOPIC_XXXX", 1)).ext_fields == {"offset": "0"}
        for empty in (b"", b"\x00\x00\x00\x05abc"):
            assert (await w.call(B.SEND_BATCH_MESSAGE, {**fields, "i": ""}, empty)).code == ResponseCode.MESSAGE_ILLEGAL

    run_broker(tmp_path, scenario)


def test_queue_choice_and_topic_checks(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        chosen = {int((await w.send_ok("Picked", b"m", queue_id=-1))["queueId"]) for _ in range(40)}
        assert chosen <= {0, 1, 2, 3} and len(chosen) > 1
        out_of_range = await w.send("Picked", b"m", queue_id=4)
        assert out_of_range.code == ResponseCode.SYSTEM_ERROR and "illegal" in (out_of_range.remark or "")
        forbidden = await w.send("SCHEDULE_TOPIC_XXXX", b"m")
        assert forbidden.code == ResponseCode.NO_PERMISSION
        for bad in ("bad topic", "bad/topic", "x" * 128):
            response = await w.send(bad, b"m")
            assert response.code == ResponseCode.SYSTEM_ERROR, (bad, response)

    run_broker(tmp_path, scenario)


def test_auto_created_topics_take_min_of_request_and_tbw102(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok("Wide", b"m", queue_nums=16)
        await w.send_ok("Narrow", b"m", queue_nums=3)
        response = await w.call(B.GET_ALL_TOPIC_CONFIG)
        table = TopicConfigSerializeWrapper.decode(response.body).topic_config_table
        assert (table["Wide"].write_queue_nums, table["Wide"].read_queue_nums) == (8, 8)
        assert (table["Narrow"].write_queue_nums, table["Narrow"].perm) == (3, 6)
        assert table["TBW102"].perm == 7 and table["SCHEDULE_TOPIC_XXXX"].read_queue_nums == 18
        on_disk = json.loads((tmp_path / "config" / "topics.json").read_text())
        assert on_disk["topicConfigTable"]["Wide"]["writeQueueNums"] == 8
        assert on_disk["dataVersion"]["counter"] >= 2

    run_broker(tmp_path, scenario)


def test_auto_create_disabled_answers_topic_not_exist(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        response = await w.send("NoSuchTopic", b"m")
        assert response.code == ResponseCode.TOPIC_NOT_EXIST

    run_broker(tmp_path, scenario, auto_create_topic_enable=False)


def test_sync_flush_answers_after_the_fsync(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        fields = await w.send_ok("Synced", b"durable", props={"WAIT": "true"})
        assert fields["queueOffset"] == "0"
        no_wait = await w.send_ok("Synced", b"fire and forget", props={"WAIT": "false"})
        assert no_wait["queueOffset"] == "1"
        assert len(await w.pull_records("CID", "Synced", 0)) == 2

    run_broker(tmp_path, scenario, flush_disk_type=FlushDiskType.SYNC_FLUSH)


# --- pull ------------------------------------------------------------------------------------


def test_pull_filters_by_tag_subscription(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        for tag in ("TagA", "TagB", "TagC", "TagA", "TagC"):
            await w.send_ok("Tagged", tag.encode(), props={"TAGS": tag})
        response = await w.pull("CID", "Tagged", 0, 0, subscription="TagA || TagB")
        assert response.code == ResponseCode.SUCCESS
        assert [bytes(r.body) for r in iter_records(response.body)] == [b"TagA", b"TagB", b"TagA"]
        assert response.ext_fields["nextBeginOffset"] == "5"  # filtered entries are skipped over too
        nothing = await w.pull("CID", "Tagged", 0, 4, subscription="TagB")
        assert (nothing.code, nothing.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "5")

    run_broker(tmp_path, scenario)


def test_pull_statuses_and_long_poll(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok("Polled", b"m0")
        caught_up = await w.pull("CID", "Polled", 0, 1)
        assert (caught_up.code, caught_up.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "1")
        too_far = await w.pull("CID", "Polled", 0, 5)
        # 4.9.7's getMessage: OFFSET_OVERFLOW_BADLY resumes at the max offset.
        assert (too_far.code, too_far.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "1")
        bad_queue = await w.pull("CID", "Polled", 9, 0)
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR
        assert (await w.pull("CID", "NoSuchTopic", 0, 0)).code == ResponseCode.TOPIC_NOT_EXIST
        write_only = {
            "topic": "WriteOnly",
            "defaultTopic": "TBW102",
            "readQueueNums": "1",
            "writeQueueNums": "1",
            "perm": "2",
            "topicFilterType": "SINGLE_TAG",
            "order": "false",
        }
        assert (await w.call(B.UPDATE_AND_CREATE_TOPIC, write_only)).code == ResponseCode.SUCCESS
        assert (await w.pull("CID", "WriteOnly", 0, 0)).code == ResponseCode.NO_PERMISSION
        started = time.monotonic()
        parked = asyncio.create_task(w.pull("CID", "Polled", 0, 1, suspend_ms=5000, timeout=10))
        await asyncio.sleep(0.2)
        assert not parked.done()
        await w.send_ok("Polled", b"m1")  # the same connection: a parked pull must not block a send
        woken = await parked
        assert woken.code == ResponseCode.SUCCESS and time.monotonic() - started < 3
        assert [bytes(r.body) for r in iter_records(woken.body)] == [b"m1"]

    run_broker(tmp_path, scenario)


# --- offsets and lookups ---------------------------------------------------------------------


def test_queue_offsets_and_store_times(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        empty = await w.offset(B.GET_MAX_OFFSET, "Timed", 0)
        assert (empty.code, empty.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
        for i in range(3):
            await w.send_ok("Timed", f"m{i}".encode())
            await asyncio.sleep(0.02)
        stamps = [r.store_timestamp for r in await w.pull_records("CID", "Timed", 0)]
        assert stamps == sorted(stamps) and stamps[0] < stamps[2]
        assert (await w.offset(B.GET_MAX_OFFSET, "Timed", 0)).ext_fields == {"offset": "3"}
        assert (await w.offset(B.GET_MIN_OFFSET, "Timed", 0)).ext_fields == {"offset": "0"}
        earliest = await w.offset(B.GET_EARLIEST_MSG_STORETIME, "Timed", 0)
        assert earliest.ext_fields == {"timestamp": str(stamps[0])}
        for timestamp, expected in ((0, "0"), (stamps[1], "1"), (stamps[2], "2")):
            found = await w.offset(B.SEARCH_OFFSET_BY_TIMESTAMP, "Timed", 0, timestamp=str(timestamp))
            assert found.ext_fields == {"offset": expected}, timestamp

    run_broker(tmp_path, scenario)


def test_query_message_by_key(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok("Keyed", b"first", props={"KEYS": "order-1 order-2", "UNIQ_KEY": "UNIQ1"})
        await w.send_ok("Keyed", b"second", props={"KEYS": "order-3"})
        fields = {"topic": "Keyed", "key": "order-2", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)}
        response = await w.call(B.QUERY_MESSAGE, fields)
        assert response.code == ResponseCode.SUCCESS, response
        assert [bytes(r.body) for r in iter_records(response.body)] == [b"first"]
        assert_string_fields(response.ext_fields)
        by_uniq = await w.call(B.QUERY_MESSAGE, {**fields, "key": "UNIQ1", "_UNIQUE_KEY_QUERY": "true"})
        assert [bytes(r.body) for r in iter_records(by_uniq.body)] == [b"first"]
        unknown = await w.call(B.QUERY_MESSAGE, {**fields, "key": "nope"})
        assert unknown.code == ResponseCode.QUERY_NOT_FOUND

    run_broker(tmp_path, scenario)


# --- admin -----------------------------------------------------------------------------------


def test_topic_admin_and_statistics(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        create = {
            "topic": "Admin",
            "defaultTopic": "TBW102",
            "readQueueNums": "3",
            "writeQueueNums": "2",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        assert (await w.call(B.UPDATE_AND_CREATE_TOPIC, create)).code == ResponseCode.SUCCESS
        table = TopicConfigSerializeWrapper.decode((await w.call(B.GET_ALL_TOPIC_CONFIG)).body).topic_config_table
        assert (table["Admin"].read_queue_nums, table["Admin"].write_queue_nums) == (3, 2)
        for queue_id, count in ((0, 3), (1, 1)):
            for _ in range(count):
                await w.send_ok("Admin", b"m", queue_id=queue_id)
        stats = TopicStatsTable.decode((await w.call(B.GET_TOPIC_STATS_INFO, {"topic": "Admin"})).body).offset_table
        broker = w.broker.config.broker_name
        assert {mq.queue_id: (o.min_offset, o.max_offset) for mq, o in stats.items()} == {0: (0, 3), 1: (0, 1)}
        assert all(mq.broker_name == broker and mq.topic == "Admin" for mq in stats)
        assert stats[MessageQueue("Admin", broker, 0)].last_update_timestamp > 0
        commit = {"consumerGroup": "CG", "topic": "Admin", "queueId": "0", "commitOffset": "1"}
        assert (await w.call(B.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
        consume = ConsumeStats.decode(
            (await w.call(B.GET_CONSUME_STATS, {"consumerGroup": "CG", "topic": "Admin"})).body
        )
        lags = {mq.queue_id: o.broker_offset - o.consumer_offset for mq, o in consume.offset_table.items()}
        assert lags == {0: 2, 1: 1, 2: 0}  # one entry per read queue
        committed_times = {mq.queue_id: o.last_timestamp for mq, o in consume.offset_table.items()}
        assert committed_times[0] > 0 and committed_times[1] == 0  # store time of the last consumed message
        everything = ConsumeStats.decode((await w.call(B.GET_CONSUME_STATS, {"consumerGroup": "CG"})).body)
        assert {mq.topic for mq in everything.offset_table} == {"Admin"}
        info = KVTable.decode((await w.call(B.GET_BROKER_RUNTIME_INFO)).body).table
        assert int(info["commitLogMaxOffset"]) > 0 and int(info["commitLogMinOffset"]) == 0
        assert (await w.call(B.DELETE_TOPIC_IN_BROKER, {"topic": "Admin"})).code == ResponseCode.SUCCESS
        table = TopicConfigSerializeWrapper.decode((await w.call(B.GET_ALL_TOPIC_CONFIG)).body).topic_config_table
        assert "Admin" not in table
        gone = await w.call(B.GET_TOPIC_STATS_INFO, {"topic": "Admin"})
        assert gone.code == ResponseCode.TOPIC_NOT_EXIST
        assert (await w.offset(B.GET_MAX_OFFSET, "Admin", 0)).ext_fields == {"offset": "0"}

    run_broker(tmp_path, scenario)


def test_malformed_and_unknown_requests_answer_without_closing(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        missing = await w.call(B.SEND_MESSAGE_V2, {"b": "T"}, b"m")
        assert missing.code == ResponseCode.SYSTEM_ERROR and "'a'" in (missing.remark or "")
        unknown = await w.call(9999)
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert (await w.send("StillOpen", b"m")).code == ResponseCode.SUCCESS

    run_broker(tmp_path, scenario)


def test_properties_of_a_stored_message_round_trip(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok("Props", "ünïcode".encode(), props={"TAGS": "t", "k": "välue"})
        (record,) = await w.pull_records("CID", "Props", 0)
        assert decode_properties(record.properties_raw)["k"] == "välue"
        assert bytes(record.body).decode() == "ünïcode"

    run_broker(tmp_path, scenario)
