"""Real frames captured from the C++ and ali-ons clients: decode what they sent, re-encode what they accepted.

Request headers are copied verbatim from the capture log (``hdr=...``), with the trailing newline
jsoncpp's FastWriter adds for C++. Response frames are the exact bytes
the capture server sent and both clients accepted; sparkmq must produce them byte for byte.
"""

from __future__ import annotations

import struct

import pytest

from sparkmq.protocol import FrameDecoder, LanguageCode, RemotingCommand, RequestCode, ResponseCode, decode_frame
from sparkmq.protocol.bodies import BrokerData, QueueData, TopicRouteData
from sparkmq.protocol.group_bodies import ConsumerListBody
from sparkmq.protocol.headers import (
    ConsumerGroupRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    parse_send_request_header,
)
from sparkmq.protocol.heartbeat import ConsumeFromWhere, ConsumeType, HeartbeatData, MessageModel


def request_frame(header: str, body: bytes = b"", *, cpp: bool) -> bytes:
    """Frame a captured request header as the client did (C++ appends "\\n", type byte 0)."""
    raw = (header + ("\n" if cpp else "")).encode("utf-8")
    return struct.pack(">II", 4 + len(raw) + len(body), len(raw)) + raw + body


CPP_ROUTE = r'{"code":105,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"N/YT7X6tJe5UfutmW+uNwTTJ7Fc=","topic":"TopicTest"},"flag":0,"language":"CPP","opaque":0,"remark":"","version":63}'
CPP_SEND = r'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"/0XqNFiCO4Rwtq774yGvbPs3e90=","batch":"0","bornTimestamp":"1795237221692","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"PID_TEST","properties":"KEYS\u0001KEY1 KEY2\u0002TAGS\u0001TagA\u0002UNIQ_KEY\u00010100007F000054F00000BC776F6D0100\u0002WAIT\u0001true\u0002myprop\u0001v1\u0002","queueId":0,"reconsumeTimes":"0","sysFlag":0,"topic":"TopicTest","unitMode":"0"},"flag":0,"language":"CPP","opaque":1,"remark":"","version":63}'
CPP_BATCH = r'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"bkjSXMtwSx7krLjN7Pk8F69RLxY=","batch":"1","bornTimestamp":"1795237221695","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,"producerGroup":"PID_TEST","properties":"WAIT\u0001true\u0002","queueId":2,"reconsumeTimes":"0","sysFlag":0,"topic":"TopicTest","unitMode":"0"},"flag":0,"language":"CPP","opaque":4,"remark":"","version":63}'
CPP_BATCH_BODY = b"\x00\x00\x00[\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07batch-1\x00>TAGS\x01TagA\x02UNIQ_KEY\x010100007F000054F00000BF776F6D0400\x02WAIT\x01true\x02\x00\x00\x00[\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07batch-2\x00>TAGS\x01TagA\x02UNIQ_KEY\x010100007F000054F00000BF776F6D0500\x02WAIT\x01true\x02"
CPP_HEARTBEAT = r'{"code":34,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"5U/7P2vAXG4CVSduPY/whObLwsE="},"flag":0,"language":"CPP","opaque":7,"remark":"","version":63}'
CPP_HEARTBEAT_BODY = b'{"clientID":"18945-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,"groupName":"CID_TEST","messageModel":1,"subscriptionDataSet":[{"subString":"*","subVersion":"1795237221696","topic":"%RETRY%CID_TEST"},{"subString":"*","subVersion":"1795237221696","topic":"TopicTest"}]}],"producerDataSet":[{"groupName":"PID_TEST"}]}\n'
CPP_CONSUMER_LIST = r'{"code":38,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"qdQJ+h8nmxM7Fbb1fY9BQNNZp2M=","consumerGroup":"CID_TEST"},"flag":0,"language":"CPP","opaque":8,"remark":"","version":63}'
CPP_QUERY_OFFSET = r'{"code":14,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"RoJS26YvVapwHpviCqe9LHLUngQ=","consumerGroup":"CID_TEST","queueId":0,"topic":"%RETRY%CID_TEST"},"flag":0,"language":"CPP","opaque":9,"remark":"","version":63}'
CPP_PULL = r'{"code":11,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"YZ1pY4nmwZ+CdOFjbX0R/KZ9/jw=","commitOffset":"0","consumerGroup":"CID_TEST","maxMsgNums":32,"queueId":0,"queueOffset":"0","subVersion":"1795237221696","subscription":"*","suspendTimeoutMillis":"15000","sysFlag":6,"topic":"%RETRY%CID_TEST"},"flag":0,"language":"CPP","opaque":13,"remark":"","version":63}'
CPP_UPDATE_OFFSET = r'{"code":15,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"z3kbXtkKtGkNVVXo8fudkI/M/7s=","commitOffset":"0","consumerGroup":"CID_TEST","queueId":0,"topic":"%RETRY%CID_TEST"},"flag":0,"language":"CPP","opaque":42,"remark":"","version":63}'
CPP_UNREGISTER = r'{"code":35,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"7g0qWpTbJKogZe6oXXo8+AUKK4o=","clientID":"18945-127.0.0.1@DEFAULT","consumerGroup":"CID_TEST","producerGroup":""},"flag":0,"language":"CPP","opaque":66,"remark":"","version":63}'

ONS_ROUTE = r'{"code":105,"language":"JAVA","opaque":1,"flag":0,"version":121,"extFields":{"topic":"TopicTest"}}'
ONS_SEND = r'{"code":310,"language":"JAVA","opaque":2,"flag":0,"version":121,"extFields":{"a":"PID_ONS","b":"TopicTest","c":"TBW102","d":4,"e":3,"f":0,"g":1795237382586,"h":0,"i":"TAGS\u0001TagA\u0002KEYS\u0001K1 K2\u0002","j":0,"k":false}}'
ONS_HEARTBEAT = r'{"code":34,"language":"JAVA","opaque":9,"flag":0,"version":121,"extFields":{}}'
# The log truncated this body after '"c'; the tail (second subscription's subVersion, unitMode, the
# producer set of the shared MQClient) is reconstructed from ali-ons' buildSubscriptionData and
# _prepareHeartbeatData, so only the fields before the cut are real.
ONS_HEARTBEAT_BODY = b'{"clientID":"192.0.2.2@23414","consumerDataSet":[{"groupName":"CID_ONS","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"topic":"TopicTest","subString":"*","classFilterMode":false,"tagsSet":[],"codeSet":[],"subVersion":1795237382588},{"topic":"%RETRY%CID_ONS","subString":"*","classFilterMode":false,"tagsSet":[],"codeSet":[],"subVersion":1795237382588}],"unitMode":false}],"producerDataSet":[{"groupName":"PID_ONS"}]}'
ONS_CONSUMER_LIST = (
    r'{"code":38,"language":"JAVA","opaque":11,"flag":0,"version":121,"extFields":{"consumerGroup":"CID_ONS"}}'
)
ONS_QUERY_OFFSET = r'{"code":14,"language":"JAVA","opaque":13,"flag":0,"version":121,"extFields":{"topic":"TopicTest","consumerGroup":"CID_ONS","queueId":0}}'
ONS_PULL = r'{"code":11,"language":"JAVA","opaque":17,"flag":0,"version":121,"extFields":{"consumerGroup":"CID_ONS","topic":"TopicTest","queueId":0,"queueOffset":0,"maxMsgNums":32,"sysFlag":6,"commitOffset":0,"suspendTimeoutMillis":15000,"subscription":"*","subVersion":1795237382588}}'
ONS_UPDATE_OFFSET = r'{"code":15,"language":"JAVA","opaque":47,"flag":0,"version":121,"extFields":{"topic":"TopicTest","consumerGroup":"CID_ONS","queueId":0,"commitOffset":-1}}'
ONS_UNREGISTER = r'{"code":35,"language":"JAVA","opaque":71,"flag":0,"version":121,"extFields":{"clientID":"192.0.2.2@23414","consumerGroup":"CID_ONS"}}'

CPP_FRAMES = [
    request_frame(CPP_ROUTE, cpp=True),
    request_frame(CPP_SEND, b"hello sparkmq", cpp=True),
    request_frame(CPP_BATCH, CPP_BATCH_BODY, cpp=True),
    request_frame(CPP_HEARTBEAT, CPP_HEARTBEAT_BODY, cpp=True),
    request_frame(CPP_CONSUMER_LIST, cpp=True),
    request_frame(CPP_QUERY_OFFSET, cpp=True),
    request_frame(CPP_PULL, cpp=True),
    request_frame(CPP_UPDATE_OFFSET, cpp=True),
    request_frame(CPP_UNREGISTER, cpp=True),
]
ONS_FRAMES = [
    request_frame(ONS_ROUTE, cpp=False),
    request_frame(ONS_SEND, b"hello from ali-ons", cpp=False),
    request_frame(ONS_HEARTBEAT, ONS_HEARTBEAT_BODY, cpp=False),
    request_frame(ONS_CONSUMER_LIST, cpp=False),
    request_frame(ONS_QUERY_OFFSET, cpp=False),
    request_frame(ONS_PULL, cpp=False),
    request_frame(ONS_UPDATE_OFFSET, cpp=False),
    request_frame(ONS_UNREGISTER, cpp=False),
]

# Exact response bytes from the capture, accepted by the real clients.
ROUTE_RESPONSE_HEAD = b'\x00\x00\x01[\x00\x00\x00n{"code":0,"flag":1,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{}}'
# The log cut the route body; this reconstruction has exactly the 233 bytes the length prefix announces.
ROUTE_BODY_FASTJSON = b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:20911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
SEND_RESPONSE = b'\x00\x00\x00\xeb\x00\x00\x00\xe7{"code":0,"flag":1,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{"msgId":"7F000001000051AF0000000000000000","queueId":"0","queueOffset":"0","MSG_REGION":"DefaultRegion","TRACE_ON":"true"}}'
BATCH_RESPONSE = b'\x00\x00\x01\x0c\x00\x00\x01\x08{"code":0,"flag":1,"language":"JAVA","opaque":4,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{"msgId":"7F000001000051AF0000000000000234,7F000001000051AF00000000000002DD","queueId":"2","queueOffset":"0","MSG_REGION":"DefaultRegion","TRACE_ON":"true"}}'
HEARTBEAT_RESPONSE = b'\x00\x00\x00r\x00\x00\x00n{"code":0,"flag":1,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{}}'
CONSUMER_LIST_RESPONSE = b'\x00\x00\x00\xa0\x00\x00\x00n{"code":0,"flag":1,"language":"JAVA","opaque":8,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{}}{"consumerIdList":["18945-127.0.0.1@DEFAULT"]}'
QUERY_OFFSET_RESPONSE = b'\x00\x00\x00~\x00\x00\x00z{"code":0,"flag":1,"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{"offset":"0"}}'
PULL_NOT_FOUND_RESPONSE = b'\x00\x00\x00\xc4\x00\x00\x00\xc0{"code":19,"flag":1,"language":"JAVA","opaque":13,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{"suggestWhichBrokerId":"0","nextBeginOffset":"0","minOffset":"0","maxOffset":"0"}}'
UPDATE_OFFSET_RESPONSE = b'\x00\x00\x00s\x00\x00\x00o{"code":0,"flag":1,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{}}'
ONS_SEND_RESPONSE = b'\x00\x00\x00\xeb\x00\x00\x00\xe7{"code":0,"flag":1,"language":"JAVA","opaque":2,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{"msgId":"7F000001000051B30000000000000000","queueId":"3","queueOffset":"0","MSG_REGION":"DefaultRegion","TRACE_ON":"true"}}'
ONS_CONSUMER_LIST_RESPONSE = b'\x00\x00\x00\x99\x00\x00\x00o{"code":0,"flag":1,"language":"JAVA","opaque":11,"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{}}{"consumerIdList":["192.0.2.2@23414"]}'


def test_capture_response_frames_are_self_consistent() -> None:
    assert struct.unpack(">I", ROUTE_RESPONSE_HEAD[:4])[0] == 4 + 110 + len(ROUTE_BODY_FASTJSON)
    for frame in (SEND_RESPONSE, BATCH_RESPONSE, CONSUMER_LIST_RESPONSE, PULL_NOT_FOUND_RESPONSE):
        assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4


# --- C++ 1.2.3 requests ----------------------------------------------------------------------


def test_cpp_route_request() -> None:
    cmd = decode_frame(CPP_FRAMES[0])
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version) == (RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, 0, 63)
    assert cmd.language is LanguageCode.CPP
    assert cmd.remark == ""
    assert cmd.ext_fields["topic"] == "TopicTest"
    assert cmd.ext_fields["OnsChannel"] == "ALIYUN"
    assert not cmd.is_response and not cmd.is_oneway


def test_cpp_send_request_mixed_number_and_string_fields() -> None:
    cmd = decode_frame(CPP_FRAMES[1])
    assert cmd.body == b"hello sparkmq"
    assert cmd.ext_fields["queueId"] == "0"  # a JSON number on the wire
    assert cmd.ext_fields["bornTimestamp"] == "1795237221692"  # a JSON string on the wire
    header = parse_send_request_header(cmd.code, cmd.ext_fields)
    assert header.producer_group == "PID_TEST"
    assert header.topic == "TopicTest"
    assert (header.default_topic, header.default_topic_queue_nums) == ("TBW102", 4)
    assert (header.queue_id, header.sys_flag, header.flag, header.reconsume_times) == (0, 0, 0, 0)
    assert header.born_timestamp == 1795237221692
    assert header.batch is False and header.unit_mode is False
    assert header.properties == (
        "KEYS\x01KEY1 KEY2\x02TAGS\x01TagA\x02UNIQ_KEY\x010100007F000054F00000BC776F6D0100\x02WAIT\x01true\x02myprop\x01v1\x02"
    )


def test_cpp_batch_is_code_10_with_batch_1() -> None:
    cmd = decode_frame(CPP_FRAMES[2])
    header = parse_send_request_header(cmd.code, cmd.ext_fields)
    assert cmd.code == RequestCode.SEND_MESSAGE
    assert header.batch is True  # "1", which Java's parseBoolean would read as false
    assert header.queue_id == 2
    assert cmd.body == CPP_BATCH_BODY


def test_cpp_heartbeat_body() -> None:
    cmd = decode_frame(CPP_FRAMES[3])
    data = HeartbeatData.decode(cmd.body)
    assert data.client_id == "18945-127.0.0.1@DEFAULT"
    assert [p.group_name for p in data.producer_data_set] == ["PID_TEST"]
    (consumer,) = data.consumer_data_set
    assert consumer.group_name == "CID_TEST"
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model is MessageModel.CLUSTERING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert [s.topic for s in consumer.subscription_data_set] == ["%RETRY%CID_TEST", "TopicTest"]
    assert {s.sub_version for s in consumer.subscription_data_set} == {1795237221696}
    assert consumer.subscription_data_set[0].tags_set == ()


def test_cpp_consumer_management_requests() -> None:
    assert ConsumerGroupRequestHeader.from_fields(decode_frame(CPP_FRAMES[4]).ext_fields).consumer_group == "CID_TEST"
    query = QueryConsumerOffsetRequestHeader.from_fields(decode_frame(CPP_FRAMES[5]).ext_fields)
    assert query == QueryConsumerOffsetRequestHeader("CID_TEST", "%RETRY%CID_TEST", 0)
    update = UpdateConsumerOffsetRequestHeader.from_fields(decode_frame(CPP_FRAMES[7]).ext_fields)
    assert update == UpdateConsumerOffsetRequestHeader("CID_TEST", "%RETRY%CID_TEST", 0, 0)
    unregister = UnregisterClientRequestHeader.from_fields(decode_frame(CPP_FRAMES[8]).ext_fields)
    assert unregister == UnregisterClientRequestHeader("18945-127.0.0.1@DEFAULT", "", "CID_TEST")


def test_cpp_pull_request() -> None:
    header = PullMessageRequestHeader.from_fields(decode_frame(CPP_FRAMES[6]).ext_fields)
    assert header == PullMessageRequestHeader(
        consumer_group="CID_TEST",
        topic="%RETRY%CID_TEST",
        queue_id=0,
        queue_offset=0,
        max_msg_nums=32,
        sys_flag=6,
        commit_offset=0,
        suspend_timeout_millis=15000,
        sub_version=1795237221696,
        subscription="*",
    )


# --- ali-ons requests ------------------------------------------------------------------------


def test_ons_route_request() -> None:
    cmd = decode_frame(ONS_FRAMES[0])
    assert (cmd.code, cmd.opaque, cmd.version, cmd.remark) == (105, 1, 121, None)
    assert cmd.language is LanguageCode.JAVA
    assert cmd.ext_fields == {"topic": "TopicTest"}


def test_ons_send_v2_numbers_and_json_false() -> None:
    cmd = decode_frame(ONS_FRAMES[1])
    assert cmd.ext_fields["k"] == "false" and cmd.ext_fields["g"] == "1795237382586"
    header = parse_send_request_header(cmd.code, cmd.ext_fields)
    assert (header.producer_group, header.topic, header.queue_id) == ("PID_ONS", "TopicTest", 3)
    assert header.born_timestamp == 1795237382586
    assert header.properties == "TAGS\x01TagA\x02KEYS\x01K1 K2\x02"
    assert header.unit_mode is False and header.batch is False and header.max_reconsume_times is None
    assert cmd.body == b"hello from ali-ons"


def test_ons_heartbeat_enum_names() -> None:
    data = HeartbeatData.decode(decode_frame(ONS_FRAMES[2]).body)
    (consumer,) = data.consumer_data_set
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.subscription_data_set[0].sub_version == 1795237382588


def test_ons_pull_and_offsets_as_json_numbers() -> None:
    pull = PullMessageRequestHeader.from_fields(decode_frame(ONS_FRAMES[5]).ext_fields)
    assert (pull.queue_offset, pull.commit_offset, pull.suspend_timeout_millis, pull.sub_version) == (
        0,
        0,
        15000,
        1795237382588,
    )
    update = UpdateConsumerOffsetRequestHeader.from_fields(decode_frame(ONS_FRAMES[6]).ext_fields)
    assert update.commit_offset == -1
    unregister = UnregisterClientRequestHeader.from_fields(decode_frame(ONS_FRAMES[7]).ext_fields)
    assert unregister.producer_group is None


# --- responses, byte for byte ----------------------------------------------------------------


def _request(frame: bytes) -> RemotingCommand:
    return decode_frame(frame)


def test_send_response_bytes() -> None:
    header = SendMessageResponseHeader(
        "7F000001000051AF0000000000000000", 0, 0, msg_region="DefaultRegion", trace_on=True
    )
    response = _request(CPP_FRAMES[1]).make_response(ext_fields=header.to_fields())
    assert response.encode() == SEND_RESPONSE
    batch = SendMessageResponseHeader(
        "7F000001000051AF0000000000000234,7F000001000051AF00000000000002DD", 2, 0, None, "DefaultRegion", True
    )
    assert _request(CPP_FRAMES[2]).make_response(ext_fields=batch.to_fields()).encode() == BATCH_RESPONSE
    ons = SendMessageResponseHeader("7F000001000051B30000000000000000", 3, 0, msg_region="DefaultRegion", trace_on=True)
    assert _request(ONS_FRAMES[1]).make_response(ext_fields=ons.to_fields()).encode() == ONS_SEND_RESPONSE


def test_empty_success_response_bytes() -> None:
    assert _request(CPP_FRAMES[3]).make_response().encode() == HEARTBEAT_RESPONSE
    assert _request(CPP_FRAMES[7]).make_response().encode() == UPDATE_OFFSET_RESPONSE


def test_consumer_list_response_bytes() -> None:
    body = ConsumerListBody(("18945-127.0.0.1@DEFAULT",)).encode()
    assert _request(CPP_FRAMES[4]).make_response(body=body).encode() == CONSUMER_LIST_RESPONSE
    ons_body = ConsumerListBody(("192.0.2.2@23414",)).encode()
    assert _request(ONS_FRAMES[3]).make_response(body=ons_body).encode() == ONS_CONSUMER_LIST_RESPONSE


def test_offset_and_pull_response_bytes() -> None:
    offset = _request(CPP_FRAMES[5]).make_response(ext_fields=OffsetResponseHeader(0).to_fields())
    assert offset.encode() == QUERY_OFFSET_RESPONSE
    pull = _request(CPP_FRAMES[6]).make_response(
        ResponseCode.PULL_NOT_FOUND, ext_fields=PullMessageResponseHeader(0, 0, 0, 0).to_fields()
    )
    assert pull.encode() == PULL_NOT_FOUND_RESPONSE


def test_route_response_quoted_keys_and_fastjson_form() -> None:
    route = TopicRouteData(
        queue_datas=(QueueData("broker-a", 4, 4, 6, 0),),
        broker_datas=(BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:20911"}),),
    )
    # sparkmq writes standard JSON ("0"); the capture server wrote fastjson's bare 0. Both worked.
    quoted = ROUTE_BODY_FASTJSON.replace(b"{0:", b'{"0":')
    assert route.encode() == quoted
    response = _request(CPP_FRAMES[0]).make_response(body=route.encode())
    assert response.encode() == struct.pack(">I", 4 + 110 + len(quoted)) + ROUTE_RESPONSE_HEAD[4:] + quoted
    assert TopicRouteData.decode(ROUTE_BODY_FASTJSON) == route


@pytest.mark.parametrize(
    ("frame", "opaque", "code", "ext"),
    [
        (SEND_RESPONSE, 1, 0, {"msgId": "7F000001000051AF0000000000000000", "queueId": "0", "queueOffset": "0"}),
        (PULL_NOT_FOUND_RESPONSE, 13, 19, {"nextBeginOffset": "0"}),
        (QUERY_OFFSET_RESPONSE, 9, 0, {"offset": "0"}),
    ],
)
def test_decode_captured_responses(frame: bytes, opaque: int, code: int, ext: dict[str, str]) -> None:
    cmd = decode_frame(frame)
    assert (cmd.opaque, cmd.code, cmd.is_response, cmd.version) == (opaque, code, True, 407)
    assert ext.items() <= cmd.ext_fields.items()


def test_captured_response_header_decoders() -> None:
    send = SendMessageResponseHeader.from_fields(decode_frame(SEND_RESPONSE).ext_fields)
    assert send.trace_on is True and send.msg_region == "DefaultRegion" and send.queue_offset == 0
    pull = PullMessageResponseHeader.from_fields(decode_frame(PULL_NOT_FOUND_RESPONSE).ext_fields)
    assert pull == PullMessageResponseHeader(0, 0, 0, 0)
    listed = ConsumerListBody.decode(decode_frame(CONSUMER_LIST_RESPONSE).body)
    assert listed.consumer_id_list == ("18945-127.0.0.1@DEFAULT",)


def test_whole_sessions_decode_the_same_fed_whole_or_byte_by_byte() -> None:
    for frames in (CPP_FRAMES, ONS_FRAMES):
        stream = b"".join(frames)
        whole = FrameDecoder().feed(stream)
        decoder = FrameDecoder()
        trickled = [cmd for i in range(len(stream)) for cmd in decoder.feed(stream[i : i + 1])]
        assert whole == trickled == [decode_frame(f) for f in frames]
        assert decoder.buffered_bytes == 0
