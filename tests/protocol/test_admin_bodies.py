"""Registration, cluster and mqadmin bodies: reference examples byte for byte, both directions."""

from __future__ import annotations

import struct
import zlib

import pytest

from sparkmq.errors import InvalidFieldError
from sparkmq.protocol.admin_bodies import (
    Connection,
    ConsumerConnection,
    ConsumeStats,
    OffsetWrapper,
    ResetOffsetBody,
    TopicOffset,
    TopicStatsTable,
)
from sparkmq.protocol.bodies import BrokerData, MessageQueue
from sparkmq.protocol.heartbeat import ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData
from sparkmq.protocol.namesrv_bodies import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)

# A Java broker's REGISTER_BROKER body (RegisterBrokerBody as JSON), whitespace removed.
REGISTER_BODY = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"timestamp":1700000000000},'
    b'"topicConfigTable":{"TopicTest":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
    b'"topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}}}}'
)
REGISTER = RegisterBrokerBody(
    TopicConfigSerializeWrapper({"TopicTest": TopicConfig("TopicTest", 4, 4, 6)}, DataVersion(1700000000000, 3))
)


def sized(raw: bytes) -> bytes:
    return struct.pack(">i", len(raw)) + raw


def test_register_broker_body_reference_bytes() -> None:
    assert REGISTER.encode() == REGISTER_BODY
    assert RegisterBrokerBody.decode(REGISTER_BODY) == REGISTER


def test_register_broker_body_compressed_like_java() -> None:
    stream = (
        sized(b'{"counter":3,"timestamp":1700000000000}')
        + struct.pack(">i", 1)
        + sized(b"TopicTest 4 4 6 SINGLE_TAG")
        + sized(b"[]")
    )
    java_like = zlib.compress(stream, 9)
    assert RegisterBrokerBody.decode(java_like, compressed=True) == REGISTER
    assert zlib.decompress(REGISTER.encode(compressed=True)) == stream


def test_compressed_topic_config_drops_sys_flag_and_order_like_java_4_9_7() -> None:
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"O": TopicConfig("O", 2, 2, 6, "SINGLE_TAG", 1, True)}))
    decoded = RegisterBrokerBody.decode(body.encode(compressed=True), compressed=True)
    assert decoded.topic_config_serialize_wrapper.topic_config_table["O"] == TopicConfig("O", 2, 2, 6, "SINGLE_TAG")
    assert TopicConfig.decode_compact("T 1 2 6 MULTI_TAG {}") == TopicConfig("T", 1, 2, 6, "MULTI_TAG")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"not zlib", "not zlib"),
        (zlib.compress(b"\x00\x00"), "truncated"),
        (zlib.compress(sized(b"{}") + struct.pack(">i", 1) + struct.pack(">i", 99)), "truncated"),
        (zlib.compress(struct.pack(">i", -5)), "negative length"),
        (zlib.compress(sized(b"{}") + struct.pack(">i", 1) + sized(b"T x")), "malformed"),
    ],
)
def test_bad_compressed_register_bodies(data: bytes, match: str) -> None:
    with pytest.raises(InvalidFieldError, match=match):
        RegisterBrokerBody.decode(data, compressed=True)


def test_compressed_register_body_inflation_is_bounded() -> None:
    bomb = zlib.compress(bytes(10_000_000), 9)
    assert len(bomb) < 20_000
    with pytest.raises(InvalidFieldError, match="inflates past 1024 bytes"):
        RegisterBrokerBody.decode(bomb, compressed=True, max_bytes=1024)


def test_topic_config_wrapper_standalone_and_defaults() -> None:
    wrapper = TopicConfigSerializeWrapper({"B": TopicConfig("B"), "A": TopicConfig("A", order=True)}, DataVersion(5, 1))
    text = wrapper.encode()
    assert text.index(b'"A"') < text.index(b'"B"')
    assert TopicConfigSerializeWrapper.decode(text) == wrapper
    assert TopicConfig.from_json({"topicName": "X"}, "t") == TopicConfig("X", 16, 16, 6, "SINGLE_TAG", 0, False)


def test_cluster_info_reference_shape() -> None:
    info = ClusterInfo(
        {"broker-a": BrokerData("DefaultCluster", "broker-a", {0: "ip:10911"})}, {"DefaultCluster": ("broker-a",)}
    )
    fastjson = (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"ip:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
    )
    assert info.encode() == fastjson.replace(b"{0:", b'{"0":')
    assert ClusterInfo.decode(fastjson) == info


# --- mqadmin statistics: fastjson object-keyed maps ------------------------------------------

MQ0 = MessageQueue("T", "broker-a", 0)
MQ1 = MessageQueue("T", "broker-a", 1)


def test_topic_stats_table_object_keys() -> None:
    table = TopicStatsTable({MQ0: TopicOffset(0, 3, 1700000000000), MQ1: TopicOffset(2, 2, 0)})
    body = table.encode()
    assert body == (
        b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"lastUpdateTimestamp":1700000000000,'
        b'"maxOffset":3,"minOffset":0},{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"lastUpdateTimestamp":0,'
        b'"maxOffset":2,"minOffset":2}}}'
    )
    assert TopicStatsTable.decode(body) == table


def test_consume_stats_object_keys_and_double_tps() -> None:
    stats = ConsumeStats({MQ0: OffsetWrapper(5, 4, 1700000000000)})
    body = stats.encode()
    assert body == (
        b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        b'{"brokerOffset":5,"consumerOffset":4,"lastTimestamp":1700000000000}}}'
    )
    assert ConsumeStats.decode(body) == stats
    assert ConsumeStats.decode(b'{"consumeTps":1.5,"offsetTable":{}}').consume_tps == 1.5


def test_reset_offset_body_java_and_cpp_forms() -> None:
    body = ResetOffsetBody({MQ0: 7})
    assert body.encode() == b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:7}}'
    assert body.encode_cpp() == b'{"offsetTable":[{"brokerName":"broker-a","queueId":0,"topic":"T","offset":7}]}'
    assert ResetOffsetBody.decode(body.encode()) == ResetOffsetBody.decode(body.encode_cpp()) == body


def test_bad_object_key_is_named() -> None:
    with pytest.raises(InvalidFieldError) as info:
        TopicStatsTable.decode(b'{"offsetTable":{{"queueId":0}:{}}}')
    assert info.value.field == "offsetTable key.topic"


def test_consumer_connection_round_trip() -> None:
    connection = ConsumerConnection(
        (Connection("1-127.0.0.1@DEFAULT", "127.0.0.1:50000", "CPP", 63),),
        {"T": SubscriptionData("T", "*", sub_version=9)},
        ConsumeType.CONSUME_PASSIVELY,
        MessageModel.CLUSTERING,
        ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
    )
    body = connection.encode()
    assert body.startswith(
        b'{"connectionSet":[{"clientAddr":"127.0.0.1:50000","clientId":"1-127.0.0.1@DEFAULT","language":"CPP",'
        b'"version":63}],"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",'
    )
    assert ConsumerConnection.decode(body) == connection
