"""Typed custom headers: every schema round-trips, every required field is enforced by name."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

import pytest

from sparkmq.errors import InvalidFieldError, ProtocolError
from sparkmq.protocol import admin_headers, headers
from sparkmq.protocol.scalars import parse_bool, parse_int
from sparkmq.protocol.schema import CommandHeader, Int32, Int64, wire_key

HEADER_CLASSES = sorted(
    {
        obj
        for module in (headers, admin_headers)
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, CommandHeader) and obj is not CommandHeader
    },
    key=lambda cls: cls.__name__,
)
SAMPLE = {"str": "s-1", "int32": "-2147483648", "int64": "9223372036854775807", "bool": "true"}


def full_fields(cls: type[CommandHeader]) -> dict[str, str]:
    return {spec.key: SAMPLE[spec.kind.value] for spec in cls.specs()}


def test_there_are_many_header_classes() -> None:
    assert len(HEADER_CLASSES) >= 35


@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
def test_round_trip_with_every_field(cls: type[CommandHeader]) -> None:
    fields = full_fields(cls)
    header = cls.from_fields(fields | {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x="})
    assert header.to_fields() == fields
    assert all(isinstance(v, str) for v in header.to_fields().values())
    assert dataclasses.is_dataclass(header) and header.__dataclass_params__.frozen


REQUIRED = [(cls, spec.key) for cls in HEADER_CLASSES for spec in cls.specs() if spec.required]


@pytest.mark.parametrize(("cls", "key"), REQUIRED, ids=[f"{c.__name__}.{k}" for c, k in REQUIRED])
def test_missing_required_field_is_named(cls: type[CommandHeader], key: str) -> None:
    fields = full_fields(cls)
    del fields[key]
    with pytest.raises(InvalidFieldError, match=f"missing required header field '{key}'") as info:
        cls.from_fields(fields)
    assert info.value.field == key
    assert isinstance(info.value, ProtocolError) and info.value.code == 1


NUMERIC = [(cls, spec.key) for cls in HEADER_CLASSES for spec in cls.specs() if spec.kind.value.startswith("int")]


@pytest.mark.parametrize(("cls", "key"), NUMERIC, ids=[f"{c.__name__}.{k}" for c, k in NUMERIC])
def test_non_numeric_field_is_named(cls: type[CommandHeader], key: str) -> None:
    with pytest.raises(InvalidFieldError, match=f"header field '{key}' is not an integer") as info:
        cls.from_fields(full_fields(cls) | {key: "12abc"})
    assert info.value.field == key


def test_optional_fields_default_and_are_left_out() -> None:
    header = headers.UnregisterClientRequestHeader.from_fields({"clientID": "c"})
    assert header == headers.UnregisterClientRequestHeader("c", None, None)
    assert header.to_fields() == {"clientID": "c"}
    assert headers.ConsumerSendMsgBackRequestHeader(5, "g", 0).to_fields() == {
        "offset": "5",
        "group": "g",
        "delayLevel": "0",
        "unitMode": "false",
    }


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1", True), ("true", True), ("TRUE", True), ("True", True), ("0", False), ("false", False), ("FALSE", False)],
)
def test_booleans_accept_cpp_and_java_spellings(raw: str, value: bool) -> None:
    assert parse_bool(raw, "batch") is value


@pytest.mark.parametrize("raw", ["yes", "", "2", " true", "null"])
def test_bad_booleans(raw: str) -> None:
    with pytest.raises(InvalidFieldError, match="'batch' is not a boolean"):
        parse_bool(raw, "batch")


@pytest.mark.parametrize(
    ("raw", "bits", "value"), [("+5", 32, 5), ("-0", 32, 0), ("007", 64, 7), ("-2147483648", 32, -(2**31))]
)
def test_java_integer_syntax(raw: str, bits: int, value: int) -> None:
    assert parse_int(raw, "f", bits=bits) == value


@pytest.mark.parametrize(
    ("raw", "bits", "match"),
    [
        (" 1", 64, "not an integer"),
        ("1_000", 64, "not an integer"),
        ("١٢", 64, "not an integer"),  # Arabic-Indic digits: Python's int() takes them, Java does not
        ("1.0", 64, "not an integer"),
        ("", 64, "not an integer"),
        ("2147483648", 32, "out of int32 range"),
        ("9223372036854775808", 64, "out of int64 range"),
    ],
)
def test_bad_java_integers(raw: str, bits: int, match: str) -> None:
    with pytest.raises(InvalidFieldError, match=match):
        parse_int(raw, "f", bits=bits)


# --- send headers ----------------------------------------------------------------------------

V2_FIELDS = {"a": "P", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0"}


def test_v2_keys_map_to_v1_names() -> None:
    full = V2_FIELDS | {"i": "TAGS\x01A\x02", "j": "1", "k": "false", "l": "16", "m": "true", "n": "broker-a"}
    v2 = headers.SendMessageRequestHeaderV2.from_fields(full)
    v1 = v2.to_v1()
    assert v1 == headers.SendMessageRequestHeader(
        producer_group="P",
        topic="T",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=3,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties="TAGS\x01A\x02",
        reconsume_times=1,
        unit_mode=False,
        batch=True,
        max_reconsume_times=16,
        bname="broker-a",
    )
    assert headers.SendMessageRequestHeaderV2.from_v1(v1) == v2
    assert v2.to_fields() == full
    assert list(v1.to_fields())[:4] == ["producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums"]


def test_v2_missing_field_names_key_and_meaning() -> None:
    fields = dict(V2_FIELDS)
    del fields["b"]
    with pytest.raises(InvalidFieldError, match=r"'b' \(topic\)"):
        headers.SendMessageRequestHeaderV2.from_fields(fields)


@pytest.mark.parametrize("code", [310, 320])
def test_parse_send_request_header_by_code(code: int) -> None:
    assert headers.parse_send_request_header(code, V2_FIELDS | {"m": "1"}).batch is True


def test_parse_send_request_header_v1() -> None:
    v1 = headers.SendMessageRequestHeaderV2.from_fields(V2_FIELDS).to_v1()
    assert headers.parse_send_request_header(10, v1.to_fields()) == v1
    with pytest.raises(InvalidFieldError, match="'producerGroup'"):
        headers.parse_send_request_header(10, V2_FIELDS)


def test_send_response_header_field_order_and_strings() -> None:
    header = headers.SendMessageResponseHeader("ID", 2, 10, "tx", "DefaultRegion", False)
    assert header.to_fields() == {
        "msgId": "ID",
        "queueId": "2",
        "queueOffset": "10",
        "transactionId": "tx",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "false",
    }


def test_create_topic_order_is_required_like_java() -> None:
    fields = {"topic": "T", "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6"}
    fields |= {"topicFilterType": "SINGLE_TAG"}
    with pytest.raises(InvalidFieldError, match="'order'"):
        admin_headers.CreateTopicRequestHeader.from_fields(fields)
    assert admin_headers.CreateTopicRequestHeader.from_fields(fields | {"order": "false"}).read_queue_nums == 8


def test_register_broker_defaults() -> None:
    fields = {"brokerName": "b", "brokerAddr": "1.2.3.4:10911", "clusterName": "c", "haServerAddr": "1.2.3.4:10912"}
    header = admin_headers.RegisterBrokerRequestHeader.from_fields(fields | {"brokerId": "0"})
    assert (header.compressed, header.body_crc32, header.broker_id) == (False, 0, 0)


# --- the schema mechanism itself -------------------------------------------------------------


def test_schema_rejects_unsupported_types() -> None:
    @dataclass(frozen=True)
    class Bad(CommandHeader):
        n: int

    with pytest.raises(TypeError, match="use str, bool, Int32 or Int64"):
        Bad.specs()


def test_schema_rejects_non_dataclasses() -> None:
    class NotData(CommandHeader):
        pass

    with pytest.raises(TypeError, match="must be a dataclass"):
        NotData.specs()


@dataclass(frozen=True, slots=True)
class Custom(CommandHeader):
    topic_name: str
    count: Int32
    big: Int64 | None = None
    flag_on: bool = wire_key("FLAG", False)


def test_custom_schema_keys_and_order() -> None:
    assert [s.key for s in Custom.specs()] == ["topicName", "count", "big", "FLAG"]
    assert Custom.from_fields({"topicName": "t", "count": "1", "FLAG": "1"}) == Custom("t", 1, None, True)
    assert Custom("t", 1, 2, True).to_fields() == {"topicName": "t", "count": "1", "big": "2", "FLAG": "true"}
