"""RocketMQ 5's POP requests over remoting (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME): initMode,
SQL92 filters, FIFO message groups, attempt ids; and the POP journal's replay after a torn write."""

from __future__ import annotations

import time
from pathlib import Path

from sparkmq.broker.pop.journal import PopJournal
from sparkmq.message.record import iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.pop_headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
)
from support.broker_wire import Wire, run_broker

GROUP, TOPIC = "CID_POP", "PopTopic"


def pop_header(invisible_ms: int = 1000, poll_ms: int = 0) -> dict[str, str]:
    born = int(time.time() * 1000)
    return PopMessageRequestHeader(GROUP, TOPIC, -1, 8, invisible_ms, poll_ms, born, 0, "TAG", "*").to_fields()


def extra_info(fields: dict[str, str], retry: bool, queue_id: int, start: int) -> str:
    """What a Java 5.x client builds from a POP answer (``ExtraInfoUtil.buildExtraInfo``, 7 fields)."""
    kind = "1" if retry else "0"
    return f"{start} {fields['popTime']} {fields['invisibleTime']} {fields['reviveQid']} {kind} broker-a {queue_id}"


def test_pop_ack_change_invisible_and_revive_over_remoting(tmp_path: Path) -> None:
    async def scenario(wire: Wire) -> None:
        for i in range(3):
            await wire.send_ok(TOPIC, f"m{i}".encode(), queue_id=0, queue_nums=1)
        popped = await wire.call(RequestCode.POP_MESSAGE, pop_header())
        assert popped.code == ResponseCode.SUCCESS, popped.remark
        assert [bytes(m.body) for m in iter_records(popped.body)] == [b"m0", b"m1", b"m2"]
        fields = popped.ext_fields
        assert (fields["startOffsetInfo"], fields["msgOffsetInfo"]) == ("0 0 0", "0 0 0,1,2")
        info = extra_info(fields, False, 0, 0)

        def ack(offset: int, extra: str = info) -> dict[str, str]:
            return AckMessageRequestHeader(GROUP, TOPIC, 0, extra, offset).to_fields()

        assert (await wire.call(RequestCode.ACK_MESSAGE, ack(0))).code == ResponseCode.SUCCESS
        again = await wire.call(RequestCode.ACK_MESSAGE, ack(0))
        assert again.code == ResponseCode.NO_MESSAGE and "acked, expired or unknown" in (again.remark or "")
        change = ChangeInvisibleTimeRequestHeader(GROUP, TOPIC, 0, info, 1, 60_000).to_fields()
        changed = await wire.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change)
        assert changed.code == ResponseCode.SUCCESS and changed.ext_fields["invisibleTime"] == "60000"
        bad = await wire.call(RequestCode.ACK_MESSAGE, ack(2, "garbage"))
        assert bad.code == ResponseCode.NO_MESSAGE and "malformed" in (bad.remark or "")
        # m2 was neither acked nor changed: after its second of invisibility it comes back from the retry topic
        deadline = time.monotonic() + 15
        while True:
            revived = await wire.call(RequestCode.POP_MESSAGE, pop_header(invisible_ms=60_000, poll_ms=500))
            if revived.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                break
        assert revived.code == ResponseCode.SUCCESS, revived.remark
        [message] = list(iter_records(revived.body))
        assert (bytes(message.body), message.topic, message.reconsume_times) == (b"m2", f"%RETRY%{GROUP}", 1)
        assert revived.ext_fields["msgOffsetInfo"] == "1 0 0"
        retry_info = extra_info(revived.ext_fields, True, 0, 0)
        assert (await wire.call(RequestCode.ACK_MESSAGE, ack(0, retry_info))).code == ResponseCode.SUCCESS
        # the group's consumer offset: m1 (offset 1) is the first message still invisible
        committed = await wire.call(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}
        )
        assert committed.ext_fields["offset"] == "1"
        missing = PopMessageRequestHeader(GROUP, "NoSuchPopTopic", -1, 8, 1000, 0, 0, 0).to_fields()
        assert (await wire.call(RequestCode.POP_MESSAGE, missing)).code == ResponseCode.TOPIC_NOT_EXIST

    run_broker(tmp_path, scenario)


def test_journal_replays_to_its_last_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "pop" / "journal"
    journal = PopJournal(path, sync=True)
    state = journal.load()
    entries = [
        {"k": "pop", "id": 1, "g": "G", "t": "T", "q": 0, "o": [5, 6], "d": 99, "f": False},
        {"k": "off", "g": "G", "t": "T", "q": 0, "o": 7},
        {"k": "ack", "id": 1},
    ]
    journal.append(*entries)
    for entry in entries:
        state.apply(entry)
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"k":"ack","id":2')  # a crash in the middle of a line
    replayed = PopJournal(path, sync=True)
    again = replayed.load()
    replayed.close()
    assert set(again.inflight) == {2} and again.inflight[2].offset == 6
    assert again.pop_offsets == {("G", "T", 0): 7} and again.next_id == 3


def test_pop_init_mode_sql92_fifo_message_groups_and_attempt_id(tmp_path: Path) -> None:
    async def pop(wire: Wire, group: str, topic: str, **fields: object) -> RemotingCommand:
        header = PopMessageRequestHeader(
            group,
            topic,
            -1,
            int(fields.get("nums", 8)),  # type: ignore[call-overload]
            60_000,
            0,
            int(time.time() * 1000),
            int(fields.get("init_mode", 0)),  # type: ignore[call-overload]
            str(fields.get("exp_type", "TAG")),
            str(fields.get("exp", "*")),
            bool(fields.get("order", False)),
            str(fields.get("attempt_id", "")) or None,
        )
        return await wire.call(RequestCode.POP_MESSAGE, header.to_fields())

    def bodies(response: RemotingCommand) -> list[bytes]:
        assert response.code == ResponseCode.SUCCESS, response.remark
        return [bytes(m.body) for m in iter_records(response.body)]

    async def scenario(wire: Wire) -> None:
        for i in range(3):
            await wire.send_ok("InitTopic", f"m{i}".encode(), queue_nums=1, props={"n": str(i)})
        # initMode MAX starts a new group at the queue's last message (the in-memory check is off), MIN at its first
        assert bodies(await pop(wire, "G_MAX", "InitTopic", init_mode=1)) == [b"m2"]
        assert bodies(await pop(wire, "G_MIN", "InitTopic", init_mode=0)) == [b"m0", b"m1", b"m2"]
        # a 4.x consumer's committed offset of the group wins over initMode: its clustering offsets are shared
        commit = {"consumerGroup": "G_4X", "topic": "InitTopic", "queueId": "0", "commitOffset": "2"}
        assert (await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
        popped_4x = await pop(wire, "G_4X", "InitTopic", init_mode=0)
        assert bodies(popped_4x) == [b"m2"]
        ack_4x = AckMessageRequestHeader("G_4X", "InitTopic", 0, extra_info(popped_4x.ext_fields, False, 0, 0), 2)
        assert (await wire.call(RequestCode.ACK_MESSAGE, ack_4x.to_fields())).code == ResponseCode.SUCCESS
        query_4x = {"consumerGroup": "G_4X", "topic": "InitTopic", "queueId": "0"}
        assert (await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, query_4x)).ext_fields["offset"] == "3"
        sql = await pop(wire, "G_SQL", "InitTopic", exp_type="SQL92", exp="n > 0")
        assert bodies(sql) == [b"m1", b"m2"]
        bad = await pop(wire, "G_SQL", "InitTopic", exp_type="SQL92", exp="n >")
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "invalid" in (bad.remark or "")
        # the same attempt id answers the same message again; another pops the next
        first = await pop(wire, "G_TRY", "InitTopic", nums=1, attempt_id="a-1")
        assert bodies(first) == bodies(await pop(wire, "G_TRY", "InitTopic", nums=1, attempt_id="a-1")) == [b"m0"]
        assert bodies(await pop(wire, "G_TRY", "InitTopic", nums=1, attempt_id="a-2")) == [b"m1"]
        # FIFO: one message per message group in flight; group B is served while A's first is unacked
        for body, key in ((b"a0", "A"), (b"a1", "A"), (b"b0", "B"), (b"b1", "B")):
            await wire.send_ok("FifoTopic", body, queue_nums=1, props={"__SHARDINGKEY": key})
        popped = await pop(wire, "G_FIFO", "FifoTopic", order=True)
        assert bodies(popped) == [b"a0", b"b0"]
        assert (await pop(wire, "G_FIFO", "FifoTopic", order=True)).code == ResponseCode.PULL_NOT_FOUND
        info = extra_info(popped.ext_fields, False, 0, 0)
        acked = AckMessageRequestHeader("G_FIFO", "FifoTopic", 0, info, 2).to_fields()
        assert (await wire.call(RequestCode.ACK_MESSAGE, acked)).code == ResponseCode.SUCCESS
        assert bodies(await pop(wire, "G_FIFO", "FifoTopic", order=True)) == [b"b1"]
        query = {"consumerGroup": "G_FIFO", "topic": "FifoTopic", "queueId": "0"}
        committed = await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, query)
        assert committed.ext_fields["offset"] == "0"  # a0 is still in flight: the offset waits for it

    run_broker(tmp_path, scenario, enable_property_filter=True, init_pop_offset_by_check_msg_in_mem=False)


def test_journal_keeps_fifo_message_groups_through_replay_and_compaction(tmp_path: Path) -> None:
    path = tmp_path / "pop" / "journal"
    journal = PopJournal(path, sync=True)
    state = journal.load()
    key = ("G", "T", 0)
    entries = [
        {"k": "pop", "id": 1, "g": "G", "t": "T", "q": 0, "o": [0, 2], "d": 99, "f": True, "m": ["A", "B"]},
        {"k": "off", "g": "G", "t": "T", "q": 0, "o": 4, "w": {"A": [1, 3]}},
        {"k": "back", "id": 1, "n": 1},  # A's m0 expired: back to the head of A, before 1 and 3
        {"k": "ack", "id": 2},
        {"k": "pop", "id": 3, "g": "G", "t": "T", "q": 0, "o": [0], "d": 199, "f": True, "m": ["A"]},
    ]
    journal.append(*entries)
    for entry in entries:
        state.apply(entry)
    assert state.fifo_waiting == {key: {"A": [1, 3]}} and state.fifo_attempts == {(key, 0): 1}
    journal._rewrite(state)  # what compaction writes
    journal.close()
    replayed = PopJournal(path, sync=True)
    again = replayed.load()
    replayed.close()
    assert again.fifo_waiting == state.fifo_waiting and again.fifo_attempts == state.fifo_attempts
    assert {ck: (r.offset, r.message_group) for ck, r in again.inflight.items()} == {3: (0, "A")}
    assert again.pop_offsets == {key: 4}
