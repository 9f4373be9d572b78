"""ConsumerRunningInfo as Java, the C++ client and sparkmq write it."""

from __future__ import annotations

import pytest

from sparkmq.errors import InvalidFieldError
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.heartbeat import SubscriptionData
from sparkmq.protocol.running_info import ConsumerRunningInfo, ProcessQueueInfo

# The C++ client's hand-made mqTable: styled (multi-line) object keys, ``toStyledString`` values.
CPP_ANSWER = (
    b'{"jstack":"","mqTable":{{\n   "brokerName" : "broker-a",\n   "queueId" : 2,\n   "topic" : "T"\n}\n:'
    b'{\n   "cachedMsgCount" : 3,\n   "commitOffset" : 41,\n   "droped" : false,\n   "locked" : false\n}\n},'
    b'"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"},'
    b'"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"subString":"*","subVersion":"1","tagsSet":[],'
    b'"topic":"T"}]}'
)


def test_the_cpp_clients_answer_is_read() -> None:
    info = ConsumerRunningInfo.decode(CPP_ANSWER)
    assert info.mq_table == {MessageQueue("T", "broker-a", 2): ProcessQueueInfo(commit_offset=41, cached_msg_count=3)}
    assert info.properties == {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY"}
    assert [s.topic for s in info.subscription_set] == ["T"]


def test_the_cpp_clients_answer_holding_no_queue_is_a_named_error() -> None:
    with pytest.raises(InvalidFieldError, match="ConsumerRunningInfo"):
        ConsumerRunningInfo.decode(b'{"mqTable":},"jstack":"","properties":{}}')


def test_ours_round_trips_with_queues_in_java_order() -> None:
    info = ConsumerRunningInfo(
        {"PROP_CONSUMEORDERLY": "true"},
        (SubscriptionData("T", "a || b", ("a", "b")),),
        {MessageQueue("T", "b", q): ProcessQueueInfo(commit_offset=q, locked=True) for q in (3, 1, 2)},
    )
    text = info.encode()
    assert text.index(b'"queueId":1') < text.index(b'"queueId":2') < text.index(b'"queueId":3')
    assert ConsumerRunningInfo.decode(text) == info
