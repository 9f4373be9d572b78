"""JSON bodies: exact bytes the clients parse, tolerant decoding of every dialect, fastjson quirks."""

from __future__ import annotations

import json
import re

import pytest

from sparkmq.errors import InvalidFieldError
from sparkmq.protocol.bodies import (
    BrokerData,
    KVTable,
    MessageQueue,
    QueueData,
    TopicList,
    TopicRouteData,
)
from sparkmq.protocol.fastjson import loads, quote_map_keys
from sparkmq.protocol.group_bodies import ConsumerListBody, LockBatchRequestBody, LockBatchResponseBody
from sparkmq.protocol.heartbeat import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    ProducerData,
    SubscriptionData,
)

ROUTE = TopicRouteData(
    queue_datas=(QueueData("broker-a", 4, 4, 6), QueueData("broker-b", 8, 2, 4)),
    broker_datas=(
        BrokerData("DefaultCluster", "broker-a", {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"}),
        BrokerData("DefaultCluster", "broker-b", {0: "10.0.0.3:10911"}),
    ),
)


# --- fastjson tolerance ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{0:"a"}', '{"0":"a"}'),
        ('{ 0 : "a" , 12:"b"}', '{ "0" : "a" , "12":"b"}'),
        ('{"k":{-1:1}}', '{"k":{"-1":1}}'),
        ('{"s":"{0:1}, [2:3]"}', '{"s":"{0:1}, [2:3]"}'),  # strings are left alone
        ('{"s":"a\\"b{0:c"}', '{"s":"a\\"b{0:c"}'),
        ("[1,2,{0:3}]", '[1,2,{"0":3}]'),
        ('[{"a":1},{"b":2}]', '[{"a":1},{"b":2}]'),  # objects in arrays are values, not keys
        ('{{"q":0,"t":"x"}:5,{"q":1}:6}', '{"{\\"q\\":0,\\"t\\":\\"x\\"}":5,"{\\"q\\":1}":6}'),
        ('{{"s":"}"}:1}', '{"{\\"s\\":\\"}\\"}":1}'),
    ],
)
def test_quote_map_keys(text: str, expected: str) -> None:
    assert quote_map_keys(text) == expected
    json.loads(expected)


def test_loads_prefers_standard_json_and_reports_bad_bodies() -> None:
    assert loads(b'{"a":[1,2]}\n', what="x") == {"a": [1, 2]}
    with pytest.raises(InvalidFieldError, match="HeartbeatData body is not JSON") as info:
        loads(b"{oops", what="HeartbeatData")
    assert info.value.field == "HeartbeatData"
    with pytest.raises(InvalidFieldError, match="not UTF-8"):
        loads(b'{"a":"\xff"}', what="x")
    with pytest.raises(InvalidFieldError, match="nests too deeply"):
        loads(b"[" * 100000, what="x")


# --- route -----------------------------------------------------------------------------------


def test_route_exact_bytes() -> None:
    assert ROUTE.encode() == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"},{"brokerAddrs":{"0":"10.0.0.3:10911"},"brokerName":"broker-b",'
        b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
        b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4},{"brokerName":"broker-b","perm":4,'
        b'"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":2}]}'
    )


def test_route_numbers_are_json_numbers_for_jsoncpp() -> None:
    obj = json.loads(ROUTE.encode())
    for queue in obj["queueDatas"]:
        assert all(type(queue[k]) is int for k in ("perm", "readQueueNums", "writeQueueNums", "topicSysFlag"))


def test_route_decodes_quoted_and_unquoted_keys() -> None:
    unquoted = ROUTE.encode().replace(b'"0":', b"0:").replace(b'"1":', b"1:")
    assert unquoted != ROUTE.encode()
    assert TopicRouteData.decode(unquoted) == TopicRouteData.decode(ROUTE.encode()) == ROUTE
    assert ROUTE.broker_datas[0].master_addr == "10.0.0.1:10911"


def test_route_order_conf_and_old_sys_flag_spelling() -> None:
    route = TopicRouteData(order_topic_conf="broker-a:4")
    assert route.encode() == b'{"brokerDatas":[],"filterServerTable":{},"orderTopicConf":"broker-a:4","queueDatas":[]}'
    assert TopicRouteData.decode(route.encode()) == route
    old = b'{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":1,"writeQueueNums":1,"topicSynFlag":3}]}'
    assert TopicRouteData.decode(old).queue_datas[0].topic_sys_flag == 3


def test_route_filter_server_table() -> None:
    route = TopicRouteData(filter_server_table={"10.0.0.1:10911": ("10.0.0.1:3000",)})
    assert TopicRouteData.decode(route.encode()) == route


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"queueDatas":[{"perm":6}]}', "queueDatas[0].brokerName"),
        (b'{"queueDatas":[{"brokerName":"b","perm":"x"}]}', "queueDatas[0].perm"),
        (b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"master":"x"}}]}', "brokerDatas[0].brokerAddrs"),
        (b'{"brokerDatas":{}}', "brokerDatas"),
        (b"[]", "TopicRouteData"),
    ],
)
def test_route_errors_name_the_path(body: bytes, field: str) -> None:
    with pytest.raises(InvalidFieldError) as info:
        TopicRouteData.decode(body)
    assert info.value.field == field


# --- heartbeat -------------------------------------------------------------------------------


def test_heartbeat_java_form_round_trip() -> None:
    data = HeartbeatData(
        "127.0.0.1@1",
        (ProducerData("P"),),
        (
            ConsumerData(
                "C",
                ConsumeType.CONSUME_ACTIVELY,
                MessageModel.BROADCASTING,
                ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
                (SubscriptionData("T", "A || B", ("A", "B"), (65, 66), 17, False, "TAG"),),
                True,
            ),
        ),
    )
    body = data.encode()
    assert body.startswith(
        b'{"clientID":"127.0.0.1@1","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_TIMESTAMP",'
    )
    assert HeartbeatData.decode(body) == data


def test_producer_only_cpp_heartbeat_without_consumer_set() -> None:
    data = HeartbeatData.decode(b'{"clientID":"1-127.0.0.1@DEFAULT","producerDataSet":[{"groupName":"P"}]}\n')
    assert data == HeartbeatData("1-127.0.0.1@DEFAULT", (ProducerData("P"),), ())


@pytest.mark.parametrize(
    ("consumer", "field"),
    [
        ('{"groupName":"C","consumeType":7,"messageModel":1}', "consumerDataSet[0].consumeType"),
        ('{"groupName":"C","consumeType":"PUSH","messageModel":1}', "consumerDataSet[0].consumeType"),
        ('{"groupName":"C","consumeType":1}', "consumerDataSet[0].messageModel"),
        ('{"consumeType":1,"messageModel":1}', "consumerDataSet[0].groupName"),
        (
            '{"groupName":"C","consumeType":1,"messageModel":1,"subscriptionDataSet":[{"topic":"T","subVersion":"x"}]}',
            "consumerDataSet[0].subscriptionDataSet[0].subVersion",
        ),
    ],
)
def test_heartbeat_errors_name_the_path(consumer: str, field: str) -> None:
    with pytest.raises(InvalidFieldError) as info:
        HeartbeatData.decode('{"clientID":"c","consumerDataSet":[' + consumer + "]}")
    assert info.value.field == field


def test_heartbeat_requires_client_id() -> None:
    with pytest.raises(InvalidFieldError, match="clientID is missing"):
        HeartbeatData.decode(b"{}")


# --- small bodies ----------------------------------------------------------------------------


def test_lock_bodies() -> None:
    cpp = b'{"clientId":"cid","consumerGroup":"g","mqSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}\n'
    request = LockBatchRequestBody.decode(cpp)
    assert request == LockBatchRequestBody("g", "cid", (MessageQueue("T", "b", 1),))
    assert request.encode() == cpp.rstrip()
    # C++ leaves "mqSet" out when it has no queue to lock.
    assert LockBatchRequestBody.decode(b'{"clientId":"cid","consumerGroup":"g"}\n').mq_set == ()
    response = LockBatchResponseBody(request.mq_set)
    assert response.encode() == b'{"lockOKMQSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}'
    assert LockBatchResponseBody.decode(response.encode()) == response


def test_consumer_list_topic_list_kv_table() -> None:
    assert ConsumerListBody(("a", "b")).encode() == b'{"consumerIdList":["a","b"]}'
    assert ConsumerListBody.decode(b'{"consumerIdList":["a","b"]}') == ConsumerListBody(("a", "b"))
    assert TopicList(("T1", "T2")).encode() == b'{"topicList":["T1","T2"]}'
    with_addr = TopicList(("T",), "1.2.3.4:10911")
    assert with_addr.encode() == b'{"brokerAddr":"1.2.3.4:10911","topicList":["T"]}'
    assert TopicList.decode(with_addr.encode()) == with_addr
    assert KVTable({"T": "broker-a:4"}).encode() == b'{"table":{"T":"broker-a:4"}}'
    assert KVTable.decode(b'{"table":{"T":"broker-a:4"}}') == KVTable({"T": "broker-a:4"})


def test_string_lists_reject_non_strings() -> None:
    with pytest.raises(InvalidFieldError) as info:
        ConsumerListBody.decode(b'{"consumerIdList":["a",1]}')
    assert info.value.field == "consumerIdList[1]"


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b'{"topicList":["ok","\\ud800"]}', "'topicList'[1] holds a lone surrogate"),
        (b'{"table":{"a\\u0000":1}}', "'table' key 'a\\x00' holds a NUL"),
    ],
)
def test_json_bodies_refuse_lone_surrogates_and_nuls(raw: bytes, where: str) -> None:
    with pytest.raises(InvalidFieldError, match=re.escape(where)):
        loads(raw, what="demo")
    assert loads(b'{"t":"caf\\u00e9 \\ud83d\\ude00"}', what="demo") == {"t": "caf\u00e9 \U0001f600"}


def test_the_moved_bodies_still_resolve_from_bodies() -> None:
    from sparkmq.protocol import bodies, group_bodies, namesrv_bodies

    for name in group_bodies.__all__:
        assert getattr(bodies, name) is getattr(group_bodies, name)
    assert bodies.KVTable is namesrv_bodies.KVTable
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = bodies.Nothing  # type: ignore[attr-defined]
