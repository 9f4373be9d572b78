"""Broker processors for consumers over real frames: heartbeat and membership, consumer offsets,
queue locks, send-back to %RETRY% / %DLQ%, delayed delivery, and a restart on the same store.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from sparkmq.message.msgid import decode_offset_msg_id
from sparkmq.message.record import StoredMessage, iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.group_bodies import ConsumerListBody, LockBatchRequestBody, LockBatchResponseBody
from sparkmq.protocol.namesrv_bodies import TopicConfigSerializeWrapper
from sparkmq.remoting import RemotingConnection
from support.broker_wire import Wire, run_broker, serve, small_config

B = RequestCode
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


async def consumer_ids(w: Wire, group: str) -> RemotingCommand:
    return await w.call(B.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


async def eventually(predicate, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.05)
    return bool(await predicate())


# --- heartbeat and membership ----------------------------------------------------------------


def test_cpp_heartbeat_registers_a_consumer_and_its_retry_topic(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        unknown = await consumer_ids(w, "CID_NOBODY")
        assert unknown.code == ResponseCode.SYSTEM_ERROR and not unknown.body  # never an empty SUCCESS
        beat = await w.heartbeat("18945-127.0.0.1@DEFAULT", "CID_TEST", {"TopicTest": "TagA || TagB"})
        assert beat.code == ResponseCode.SUCCESS
        listed = await consumer_ids(w, "CID_TEST")
        assert listed.code == ResponseCode.SUCCESS
        assert ConsumerListBody.decode(listed.body).consumer_id_list == ("18945-127.0.0.1@DEFAULT",)
        table = TopicConfigSerializeWrapper.decode((await w.call(B.GET_ALL_TOPIC_CONFIG)).body).topic_config_table
        retry = table["%RETRY%CID_TEST"]
        assert (retry.read_queue_nums, retry.write_queue_nums, retry.perm) == (1, 1, 6)
        assert await w.broker.persister.persist_changed() == []  # tables are written off the loop, batched
        groups = json.loads((tmp_path / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
        assert groups["CID_TEST"]["retryMaxTimes"] == 16

    run_broker(tmp_path, scenario)


def test_heartbeat_subscription_filters_pulls_without_the_subscription_flag(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.heartbeat("c1", "CID_F", {"Filtered": "TagB"})
        for tag in ("TagA", "TagB"):
            await w.send_ok("Filtered", tag.encode(), props={"TAGS": tag})
        fields = {
            "consumerGroup": "CID_F",
            "topic": "Filtered",
            "queueId": "0",
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "0",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subVersion": "0",
        }
        response = await w.call(B.PULL_MESSAGE, fields)
        assert [bytes(r.body) for r in iter_records(response.body)] == [b"TagB"]

    run_broker(tmp_path, scenario)


def test_membership_changes_notify_the_group(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        notified: list[RemotingCommand] = []

        async def capture(request: RemotingCommand, connection: RemotingConnection) -> None:
            notified.append(request)

        first, second = Wire(w.broker, capture), Wire(w.broker)
        try:
            await first.heartbeat("client-1", "CID_G", {"T": "*"})
            await asyncio.sleep(0.05)
            first_join = len(notified)
            await second.heartbeat("client-2", "CID_G", {"T": "*"})
            assert await eventually(lambda: _true(len(notified) > first_join))
            note = notified[-1]
            assert note.code == B.NOTIFY_CONSUMER_IDS_CHANGED and note.ext_fields == {"consumerGroup": "CID_G"}
            assert not note.is_response
            listed = ConsumerListBody.decode((await consumer_ids(w, "CID_G")).body).consumer_id_list
            assert listed == ("client-1", "client-2")
            again = len(notified)
            await second.heartbeat("client-2", "CID_G", {"T": "*"})  # a repeated heartbeat changes nothing
            await asyncio.sleep(0.1)
            assert len(notified) == again
            unregister = {"clientID": "client-2", "producerGroup": "", "consumerGroup": "CID_G"}
            assert (await second.call(B.UNREGISTER_CLIENT, unregister)).code == ResponseCode.SUCCESS
            assert ConsumerListBody.decode((await consumer_ids(w, "CID_G")).body).consumer_id_list == ("client-1",)
            assert await eventually(lambda: _true(len(notified) > again))
            await first.close()  # closing the last member's connection removes the group
            assert await eventually(lambda: _code_is(consumer_ids(w, "CID_G"), ResponseCode.SYSTEM_ERROR))
        finally:
            await first.close()
            await second.close()

    run_broker(tmp_path, scenario)


async def _true(value: bool) -> bool:
    return value


async def _code_is(pending, code: int) -> bool:
    return bool((await pending).code == code)


# --- consumer offsets and locks --------------------------------------------------------------


def test_consumer_offsets(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok("Offsets", b"m")
        query = {"consumerGroup": "CID_NEW", "topic": "Offsets", "queueId": "0"}
        fresh = await w.call(B.QUERY_CONSUMER_OFFSET, query)
        assert (fresh.code, fresh.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})  # a new group starts at 0
        update = {**query, "commitOffset": "1"}
        assert (await w.call(B.UPDATE_CONSUMER_OFFSET, update)).code == ResponseCode.SUCCESS
        assert (await w.call(B.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": "-1"})).code == ResponseCode.SUCCESS
        stored = await w.call(B.QUERY_CONSUMER_OFFSET, query)
        assert stored.ext_fields == {"offset": "1"}  # ali-ons' -1 is ignored
        as_cpp = await w.raw(B.QUERY_CONSUMER_OFFSET, {"consumerGroup": "CID_NEW", "topic": "Offsets", "queueId": 0})
        assert as_cpp.ext_fields == {"offset": "1"}
        pull_commit = {
            "consumerGroup": "CID_P",
            "topic": "Offsets",
            "queueId": "0",
            "queueOffset": "1",
            "maxMsgNums": "32",
            "sysFlag": "5",
            "commitOffset": "1",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
        }
        await w.call(B.PULL_MESSAGE, pull_commit)  # FLAG_COMMIT_OFFSET piggybacks a commit
        committed = await w.call(B.QUERY_CONSUMER_OFFSET, {**query, "consumerGroup": "CID_P"})
        assert committed.ext_fields == {"offset": "1"}

    run_broker(tmp_path, scenario)


def test_lock_batch_mq(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        broker = w.broker.config.broker_name
        q0, q1, q2 = (MessageQueue("Ordered", broker, i) for i in range(3))

        async def lock(client: str, *queues: MessageQueue) -> tuple[MessageQueue, ...]:
            body = LockBatchRequestBody("CID_O", client, queues).encode()
            response = await w.call(B.LOCK_BATCH_MQ, body=body)
            assert response.code == ResponseCode.SUCCESS
            return LockBatchResponseBody.decode(response.body).lock_ok_mq_set

        assert set(await lock("c1", q0, q1)) == {q0, q1}
        assert set(await lock("c2", q1, q2)) == {q2}  # q1 is held by c1
        assert set(await lock("c1", q0, q1)) == {q0, q1}  # renewing one's own lock
        unlock = LockBatchRequestBody("CID_O", "c1", (q1,)).encode()
        assert (await w.call(B.UNLOCK_BATCH_MQ, body=unlock)).code == ResponseCode.SUCCESS
        assert set(await lock("c2", q1)) == {q1}
        cpp_body = json.dumps(
            {
                "clientId": "c3",
                "consumerGroup": "CID_O",
                "mqSet": [{"brokerName": broker, "queueId": 0, "topic": "Ordered"}],
            }
        ).encode()
        refused = await w.call(B.LOCK_BATCH_MQ, body=cpp_body)
        assert LockBatchResponseBody.decode(refused.body).lock_ok_mq_set == ()

    run_broker(tmp_path, scenario)


# --- send-back, retry, DLQ and delay ---------------------------------------------------------


async def stored(w: Wire, physical_offset: int) -> StoredMessage:
    response = await w.call(B.VIEW_MESSAGE_BY_ID, {"offset": str(physical_offset)})
    assert response.code == ResponseCode.SUCCESS, response
    (record,) = iter_records(response.body)
    return record


async def last_in(w: Wire, topic: str, queue_id: int) -> StoredMessage:
    records = await w.pull_records("CID_INSPECT", topic, queue_id, 0)
    assert records, f"{topic}/{queue_id} is empty"
    return records[-1]


def test_send_back_goes_to_retry_through_the_schedule_topic(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        sent = await w.send_ok("Orders", b"failed once", props={"TAGS": "t", "KEYS": "k"})
        offset = decode_offset_msg_id(sent["msgId"])[2]
        as_cpp = {"group": "CID_R", "delayLevel": 0, "offset": str(offset)}  # C++ 1.2.3 sends only these
        response = await w.raw(B.CONSUMER_SEND_MSG_BACK, as_cpp)
        assert response.code == ResponseCode.SUCCESS, response
        record = await last_in(w, SCHEDULE, 2)  # level 3 + reconsumeTimes 0 → queue 2
        props = record.properties
        assert (props["DELAY"], props["REAL_TOPIC"], props["REAL_QID"]) == ("3", "%RETRY%CID_R", "0")
        assert (props["RETRY_TOPIC"], props["TAGS"], props["KEYS"]) == ("Orders", "t", "k")
        assert props["ORIGIN_MESSAGE_ID"] == sent["msgId"]
        assert record.reconsume_times == 1 and bytes(record.body) == b"failed once"
        # The second failure of the retried copy waits one level longer (3 + 1 = 4 → queue 3).
        again = {"group": "CID_R", "delayLevel": 0, "offset": str(record.physical_offset)}
        assert (await w.raw(B.CONSUMER_SEND_MSG_BACK, again)).code == ResponseCode.SUCCESS
        second = await last_in(w, SCHEDULE, 3)
        assert (second.reconsume_times, second.properties["DELAY"]) == (2, "4")
        assert second.properties["ORIGIN_MESSAGE_ID"] == sent["msgId"]  # kept from the first time
        table = TopicConfigSerializeWrapper.decode((await w.call(B.GET_ALL_TOPIC_CONFIG)).body).topic_config_table
        assert table["%RETRY%CID_R"].write_queue_nums == 1
        lost = await w.raw(B.CONSUMER_SEND_MSG_BACK, {"group": "CID_R", "delayLevel": 0, "offset": "99999999"})
        assert lost.code == ResponseCode.SYSTEM_ERROR

    run_broker(tmp_path, scenario)


def test_send_back_past_max_reconsume_times_goes_to_the_dlq(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        sent = await w.send_ok("Orders", b"hopeless", reconsume_times=3)
        offset = decode_offset_msg_id(sent["msgId"])[2]
        fields = {
            "offset": str(offset),
            "group": "CID_D",
            "delayLevel": "0",
            "originMsgId": sent["msgId"],
            "originTopic": "Orders",
            "unitMode": "false",
            "maxReconsumeTimes": "3",
        }
        assert (await w.call(B.CONSUMER_SEND_MSG_BACK, fields)).code == ResponseCode.SUCCESS
        dead = await last_in(w, "%DLQ%CID_D", 0)
        assert bytes(dead.body) == b"hopeless" and "DELAY" not in dead.properties
        assert dead.properties["RETRY_TOPIC"] == "Orders"
        assert (await w.offset(B.GET_MAX_OFFSET, SCHEDULE, 2)).ext_fields == {"offset": "0"}
        negative = {**fields, "delayLevel": "-1", "maxReconsumeTimes": "16"}  # delayLevel < 0: straight to the DLQ
        assert (await w.call(B.CONSUMER_SEND_MSG_BACK, negative)).code == ResponseCode.SUCCESS
        assert (await w.offset(B.GET_MAX_OFFSET, "%DLQ%CID_D", 0)).ext_fields == {"offset": "2"}
        # A producer sending straight to %RETRY% past the group's retryMaxTimes (16) lands in the DLQ too.
        await w.send_ok("%RETRY%CID_D", b"resent", reconsume_times=16)
        assert (await w.offset(B.GET_MAX_OFFSET, "%DLQ%CID_D", 0)).ext_fields == {"offset": "3"}

    run_broker(tmp_path, scenario)


def test_delayed_message_is_delivered_after_its_level(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        started = time.monotonic()
        await w.send_ok("Later", b"in a second", queue_id=1, props={"DELAY": "1", "TAGS": "d"})
        assert await w.pull_records("CID_L", "Later", 1, 0) == []
        assert (await w.offset(B.GET_MAX_OFFSET, SCHEDULE, 0)).ext_fields == {"offset": "1"}
        records: list[StoredMessage] = []
        while not records and time.monotonic() - started < 4:
            await asyncio.sleep(0.1)
            records = await w.pull_records("CID_L", "Later", 1, 0)
        elapsed = time.monotonic() - started
        assert records, "the delayed message never arrived"
        assert 0.9 <= elapsed < 3.0, elapsed
        (record,) = records
        props = record.properties
        assert (props["REAL_TOPIC"], props["REAL_QID"], props["TAGS"]) == ("Later", "1", "d")
        assert "DELAY" not in props and bytes(record.body) == b"in a second"
        assert await w.broker.persister.persist_changed() == []  # delay progress is written off the loop, batched
        offsets = json.loads((tmp_path / "config" / "delayOffset.json").read_text())["offsetTable"]
        assert offsets["1"] == 1

    run_broker(tmp_path, scenario)


# --- restart ---------------------------------------------------------------------------------


def test_restart_keeps_topics_offsets_and_groups(tmp_path: Path) -> None:
    config = small_config(tmp_path)

    async def before(w: Wire) -> None:
        await w.send_ok("Durable", b"kept", queue_nums=2, props={"KEYS": "dk"})
        await w.heartbeat("c1", "CID_K", {"Durable": "*"})
        commit = {"consumerGroup": "CID_K", "topic": "Durable", "queueId": "0", "commitOffset": "1"}
        assert (await w.call(B.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS

    async def after(w: Wire) -> None:
        table = TopicConfigSerializeWrapper.decode((await w.call(B.GET_ALL_TOPIC_CONFIG)).body).topic_config_table
        assert table["Durable"].write_queue_nums == 2 and "%RETRY%CID_K" in table
        query = {"consumerGroup": "CID_K", "topic": "Durable", "queueId": "0"}
        assert (await w.call(B.QUERY_CONSUMER_OFFSET, query)).ext_fields == {"offset": "1"}
        assert [bytes(r.body) for r in await w.pull_records("CID_K", "Durable", 0)] == [b"kept"]
        assert w.broker.context is not None and "CID_K" in w.broker.context.groups.groups
        assert (await consumer_ids(w, "CID_K")).code == ResponseCode.SYSTEM_ERROR  # members are not persisted

    async def both() -> None:
        await serve(config, before)
        await serve(config, after)  # a new controller over the same store directory

    asyncio.run(both())
