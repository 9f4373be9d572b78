"""The single sends decoded from one read are stored as one group put and answered one by one.

Every frame of a scenario goes out in ONE socket write, so the broker (almost always) decodes
them from one read and serves the sends among them as one group (``SendProcessor.serve_group``): a refusal
or a malformed header answers only its own request, the accepted ones keep their order per
queue, and a pull in the same read, served after the group, sees them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmq.message.record import iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, one_write, pull_frame, run_broker, send_frame

TOPIC = "TopicGroupPut"
MAX_MESSAGE = 4096


def _send(opaque: int, body: bytes, *, topic: str = TOPIC, queue_id: str = "0", tags: str = "T") -> bytes:
    return send_frame(opaque, body, topic, queue_id=queue_id, tags=tags)


def _pull(opaque: int) -> bytes:
    return pull_frame(opaque, TOPIC)


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_one_read_of_sends_with_refusals_among_them(tmp_path: Path, flush: FlushDiskType) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"create the topic", queue_id=1)
        frames = [
            _send(1, b"m0"),
            _send(2, b"m1", tags="U"),
            _send(3, b"bad queue id", queue_id="x"),
            _send(4, b"bad topic", topic="bad topic!"),
            _send(5, b"x" * (MAX_MESSAGE + 1)),
            _send(6, b"m2", queue_id="1"),
            _send(7, b"m3"),
            _pull(8),
        ]
        responses = await one_write(w.broker.config.listen_port, frames)
        ok = {opaque: responses[opaque] for opaque in (1, 2, 6, 7)}
        assert all(r.code == ResponseCode.SUCCESS for r in ok.values()), ok
        assert [ok[o].ext_fields["queueOffset"] for o in (1, 2, 7)] == ["0", "1", "2"]
        assert (ok[6].ext_fields["queueId"], ok[6].ext_fields["queueOffset"]) == ("1", "1")
        assert responses[3].code != ResponseCode.SUCCESS and "'e'" in (responses[3].remark or "")
        assert responses[4].code == ResponseCode.SYSTEM_ERROR and "bad topic!" in (responses[4].remark or "")
        assert responses[5].code == ResponseCode.MESSAGE_ILLEGAL and "maxMessageSize" in (responses[5].remark or "")
        pulled = responses[8]
        assert pulled.code == ResponseCode.SUCCESS
        records = list(iter_records(pulled.body, check_crc=True))
        assert [bytes(r.body) for r in records] == [b"m0", b"m1", b"m3"]
        assert [r.properties["TAGS"] for r in records] == ["T", "U", "T"]
        assert [r.queue_offset for r in records] == [0, 1, 2]
        by_key = await w.call(
            RequestCode.QUERY_MESSAGE,
            {"topic": TOPIC, "key": "k2", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(2**62)},
        )
        assert by_key.code == ResponseCode.SUCCESS
        assert [bytes(r.body) for r in iter_records(by_key.body, check_crc=True)] == [b"m1"]

    run_broker(tmp_path, scenario, flush_disk_type=flush, max_message_size=MAX_MESSAGE)


def test_requests_of_one_read_are_served_in_arrival_order(tmp_path: Path) -> None:
    """A topic created by the request before a send (an admin request, served by a Task) exists
    when the send is served, though sends alone would be answered without a Task."""

    async def scenario(w: Wire) -> None:
        create = {
            "topic": "Created",
            "defaultTopic": "TBW102",
            "readQueueNums": "4",
            "writeQueueNums": "4",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "order": "false",
        }
        frames = [
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, 1, ext_fields=create).encode(),
            _send(2, b"after the create", topic="Created"),
            _send(3, b"and again", topic="Created"),
        ]
        responses = await one_write(w.broker.config.listen_port, frames)
        assert [responses[o].code for o in (1, 2, 3)] == [ResponseCode.SUCCESS] * 3, responses
        follow_up = [_send(4, b"a later read, same connection order", topic="Created")]
        assert (await one_write(w.broker.config.listen_port, follow_up))[4].code == ResponseCode.SUCCESS

    run_broker(tmp_path, scenario, auto_create_topic_enable=False)
