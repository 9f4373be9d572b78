"""The native send lane on SEND_MESSAGE (10), the C++ client's send, against the Python reference.

The C++ client writes the V1 header: long field names, JSON numbers for some fields and strings
for others, "0"/"1" booleans, AccessKey/OnsChannel/Signature beside them, a "remark" and a newline
after the JSON. For every such frame the lane takes, the records, ConsumeQueue columns, index
hashes and response frames equal what the Python decoder and encoders make of the same bytes
(``support.native_lane.check_parity``); every shape the Python path reads differently or refuses,
the lane leaves whole to it (a broker's answers both ways: tests/native/test_lane_broker.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkmq.protocol import RequestCode
from support.native_lane import (
    CPP_044_SEND,
    check_cut_and_flipped,
    check_parity,
    cpp_fields,
    raw_frame,
    scan,
    send_frame,
    v1_frame,
)

pytest.importorskip("sparkmq.native._sendlane")

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
# Escaped in ASCII-only JSON, a character past U+FFFF is a surrogate pair, which the lane leaves to the
# reference (it asks the defect check); jsoncpp writes such text as UTF-8.
_BMP_TEXT = st.text(
    st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
)
_TOPIC = st.text("abcXYZ019_-%|", min_size=1, max_size=30).filter(lambda t: not t.startswith(("%RETRY%", "%DLQ%")))
# Names the V1 header does not know (ignored by the Python path), unescaped in JSON.
_V1_NAMES = {
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "maxReconsumeTimes",
    "batch",
    "bname",
}
_UNKNOWN_KEY = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters='"\\'), max_size=12)


def _java_int(draw: st.DrawFn, value: int) -> Any:
    """``value`` as a JSON number or as one of the strings Java's parseInt reads as it."""
    style = draw(st.sampled_from(["number", "string", "zeros", "plus"]))
    if style == "number":
        return value
    if style == "string":
        return str(value)
    if style == "zeros":
        return ("-" if value < 0 else "") + "000" + str(abs(value))
    return str(value) if value < 0 else f"+{value}"


@st.composite
def _properties(draw: st.DrawFn, text: st.SearchStrategy[str]) -> str | None:
    props = draw(
        st.one_of(
            st.none(),
            text,
            st.builds(
                lambda tags, keys, uniq: f"TAGS\x01{tags}\x02KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02",
                text,
                st.lists(text.filter(lambda k: "\x02" not in k), max_size=4).map(" ".join),
                text,
            ),
        )
    )
    if props is not None and ("DELAY\x01" in props or "TRAN_MSG\x01" in props):
        return None
    return props


@st.composite
def cpp_sends(draw: st.DrawFn) -> list[bytes]:
    """C++-style sends: numbers or strings, keys in any order, optional keys there or not, unknown
    keys, nulls, remark, language, whitespace and the trailing newline varied."""
    frames = []
    for opaque in range(draw(st.integers(1, 8))):
        ascii_only = draw(st.booleans())
        text = _BMP_TEXT if ascii_only else _TEXT
        ext: dict[str, Any] = {
            "producerGroup": draw(st.sampled_from(["PID_CPP", "", "g"])),
            "topic": draw(_TOPIC),
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": _java_int(draw, draw(st.integers(-(2**31), 2**31 - 1))),
            "queueId": _java_int(draw, draw(st.integers(0, 7))),
            "sysFlag": _java_int(draw, draw(st.sampled_from([0, 1, 2, 3, 0x10, 0x20, 0x33]))),
            "bornTimestamp": _java_int(draw, draw(st.integers(-(2**63), 2**63 - 1))),
            "flag": _java_int(draw, draw(st.integers(-(2**31), 2**31 - 1))),
        }
        optional = {
            "properties": draw(_properties(text)),
            "reconsumeTimes": _java_int(draw, draw(st.integers(-(2**31), 2**31 - 1))),
            "unitMode": draw(st.sampled_from(["0", "1", "false", "true", "FALSE", "True", False, True, 0, 1, None])),
            "batch": draw(st.sampled_from(["0", "false", "False", False, 0, None])),
            "maxReconsumeTimes": _java_int(draw, draw(st.integers(-(2**31), 2**31 - 1))),
            "bname": draw(st.one_of(text, st.integers(0, 99))),
        }
        for key, value in optional.items():
            if draw(st.booleans()):
                ext[key] = value  # None: a JSON null, which the decoder drops like an absent key
        scalar = st.one_of(text, st.integers(-(10**18), 10**18), st.booleans(), st.none())
        unknown = draw(st.dictionaries(_UNKNOWN_KEY.filter(lambda k: k not in _V1_NAMES), scalar, max_size=4))
        ext.update(unknown)
        order = draw(st.permutations(list(ext)))
        top: dict[str, Any] = {
            "remark": draw(st.sampled_from(["", "r", "Ωmega", None])),
            "language": draw(st.sampled_from(["CPP", "JAVA", "OTHER"])),
            "version": draw(st.integers(0, 500)),
            "serializeTypeCurrentRPC": "JSON",
        }
        top_order = draw(st.permutations(["code", "opaque", "flag", "extFields", *top]))
        kept = [k for k in top_order if k in ("code", "opaque", "extFields") or draw(st.booleans())]
        frames.append(
            v1_frame(
                opaque,
                {key: ext[key] for key in order},
                draw(st.binary(max_size=300)),
                top=top,
                order=kept,
                ascii_only=ascii_only,
                tail=draw(st.sampled_from(["\n", "", " \r\n\t"])),
                separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
            )
        )
    return frames


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cpp_sends())
def test_cpp_sends_match_the_python_encoders(frames: list[bytes]) -> None:
    check_parity(frames, len(frames))


def test_captured_cpp_sends_are_the_lanes() -> None:
    """The header the real client sent (0.4.4), as it came, and the captures' shape with its properties."""
    captured = raw_frame(CPP_044_SEND, b"hello")
    keyed = v1_frame(7, cpp_fields(properties="KEYS\x01k1 k2\x02TAGS\x01TagA\x02UNIQ_KEY\x01U7\x02WAIT\x01true\x02"))
    check_parity([captured, keyed, captured], 3)
    assert scan(captured).code == RequestCode.SEND_MESSAGE


def test_a_group_holds_one_request_code() -> None:
    """V1 and V2 sends in one read: the lane takes the leading run of one code (the next scan the rest),
    so each group's statistics are counted under its own code."""
    v1, v2 = v1_frame(1, cpp_fields()), send_frame(2)
    group = scan(b"".join([v1, v1, v2, v1]))
    assert (group.code, group.count) == (RequestCode.SEND_MESSAGE, 2)
    group = scan(b"".join([v2, v1]))
    assert (group.code, group.count) == (RequestCode.SEND_MESSAGE_V2, 1)


def _patched_header(frame: bytes, old: bytes, new: bytes) -> bytes:
    header_length = int.from_bytes(frame[4:8])
    header, body = frame[8 : 8 + header_length], frame[8 + header_length :]
    assert header.count(old) == 1, old
    return raw_frame(header.replace(old, new), body)


_PLAIN = v1_frame(9, cpp_fields())

DECLINED = {
    "batch 1": v1_frame(9, cpp_fields(batch="1")),
    "batch true": v1_frame(9, cpp_fields(batch=True)),
    "batch TRUE": v1_frame(9, cpp_fields(batch="TRUE")),
    "batch number 1": v1_frame(9, cpp_fields(batch=1)),
    "odd batch": v1_frame(9, cpp_fields(batch="2")),
    "odd unit mode": v1_frame(9, cpp_fields(unitMode="yes")),
    "unit mode 2": v1_frame(9, cpp_fields(unitMode=2)),
    "unit mode -0": _patched_header(_PLAIN, b'"unitMode":"0"', b'"unitMode":-0'),
    "random queue": v1_frame(9, cpp_fields(queueId=-1)),
    "random queue text": v1_frame(9, cpp_fields(queueId="-1")),
    "bad queue id": v1_frame(9, cpp_fields(queueId="x")),
    "empty queue id": v1_frame(9, cpp_fields(queueId="")),
    "float queue id": v1_frame(9, cpp_fields(queueId=1.0)),
    "fraction queue id": v1_frame(9, cpp_fields(queueId=1.5)),
    "exponent queue id": _patched_header(_PLAIN, b'"queueId":0', b'"queueId":1E0'),
    "leading zero number": _patched_header(_PLAIN, b'"queueId":0', b'"queueId":01'),
    "bool queue id": v1_frame(9, cpp_fields(queueId=True)),
    "null queue id": v1_frame(9, cpp_fields(queueId=None) | {"queueId": None}),
    "missing queue id": v1_frame(9, cpp_fields(queueId=None)),
    "queue id over int32": v1_frame(9, cpp_fields(queueId=2**31)),
    "queue id text over int32": v1_frame(9, cpp_fields(queueId=str(2**31))),
    "queue id of 20 digits": v1_frame(9, cpp_fields(queueId=10**19)),
    "escaped digit": _patched_header(_PLAIN, b'"reconsumeTimes":"0"', b'"reconsumeTimes":"\\u0030"'),
    "space in number": v1_frame(9, cpp_fields(reconsumeTimes=" 1")),
    "empty reconsume": v1_frame(9, cpp_fields(reconsumeTimes="")),
    "prepared sysFlag": v1_frame(9, cpp_fields(sysFlag=4)),
    "commit sysFlag": v1_frame(9, cpp_fields(sysFlag="8")),
    "negative sysFlag": v1_frame(9, cpp_fields(sysFlag=-16)),
    "born over int64": v1_frame(9, cpp_fields(bornTimestamp="9" * 19)),
    "default queues over int32": v1_frame(9, cpp_fields(defaultTopicQueueNums=2**31)),
    "max reconsume bad": v1_frame(9, cpp_fields(maxReconsumeTimes="x")),
    "numeric topic": v1_frame(9, cpp_fields(topic=123)),
    "retry topic": v1_frame(9, cpp_fields(topic="%RETRY%G")),
    "dlq topic": v1_frame(9, cpp_fields(topic="%DLQ%G")),
    "system topic": v1_frame(9, cpp_fields(topic="RMQ_SYS_TRANS_HALF_TOPIC")),
    "escaped topic": _patched_header(_PLAIN, b'"topic":"TopicA"', b'"topic":"T\\u006fpicA"'),
    "empty topic": v1_frame(9, cpp_fields(topic="")),
    "missing topic": v1_frame(9, cpp_fields(topic=None)),
    "missing group": v1_frame(9, cpp_fields(producerGroup=None)),
    "null group": v1_frame(9, cpp_fields() | {"producerGroup": None}),
    "missing default topic": v1_frame(9, cpp_fields(defaultTopic=None)),
    "numeric properties": v1_frame(9, cpp_fields(properties=5)),
    "delay level": v1_frame(9, cpp_fields(properties="DELAY\x013\x02WAIT\x01true")),
    "transaction property": v1_frame(9, cpp_fields(properties="TRAN_MSG\x01true")),
    "NUL in properties": v1_frame(9, cpp_fields(properties="A\x01\x00")),
    "lone surrogate": _patched_header(_PLAIN, b"U1", b"\\ud800"),
    "escaped surrogate pair": v1_frame(9, cpp_fields(properties="A\x01\U0001f600")),
    "NUL remark": v1_frame(9, cpp_fields(), top={"remark": "\x00"}),
    "numeric remark": v1_frame(9, cpp_fields(), top={"remark": 5}),
    "NUL in an unknown value": v1_frame(9, cpp_fields(Signature="a\x00b")),
    "array value": v1_frame(9, cpp_fields(Signature=[1])),
    "object value": v1_frame(9, cpp_fields(Signature={"a": "b"})),
    "float unknown value": v1_frame(9, cpp_fields(Signature=1.5)),
    "huge unknown number": v1_frame(9, cpp_fields(Signature=10**30)),
    "escaped key": _patched_header(_PLAIN, b'"OnsChannel"', b'"\\u004fnsChannel"'),
    "duplicate key": _patched_header(_PLAIN, b'"queueId":0', b'"queueId":0,"queueId":1'),
    "unknown header key": v1_frame(9, cpp_fields(), top={"extra": 1}),
    "code as text": v1_frame(9, cpp_fields(), top={"code": "10"}),
    "oneway": v1_frame(9, cpp_fields(), top={"flag": 2}),
    "text after the header": v1_frame(9, cpp_fields(), tail="\nx"),
    "header over 32767 bytes": v1_frame(9, cpp_fields(properties="P" * 32768)),
    "batch code": v1_frame(9, cpp_fields(), top={"code": int(RequestCode.SEND_BATCH_MESSAGE)}),
}


@pytest.mark.parametrize("declined", list(DECLINED.values()), ids=list(DECLINED))
def test_shapes_the_lane_leaves_to_the_python_path(declined: bytes) -> None:
    """The lane stops before such a frame: alone it takes nothing, after plain sends it takes those."""
    plain = [v1_frame(1, cpp_fields()), v1_frame(2, cpp_fields(queueId="3"))]
    check_parity([declined], 0)
    check_parity([*plain, declined, v1_frame(3, cpp_fields())], 2)


def test_v2_sends_keep_their_strict_shape() -> None:
    """SEND_MESSAGE_V2 still takes only string values of the keys a..n (V1's names, numbers and a
    remark are the Python path's there): the loose reading is the V1 header's alone."""
    v2 = send_frame(9)
    for changed in (
        _patched_header(v2, b'"e":"0"', b'"e":0'),
        _patched_header(v2, b'"e":"0"', b'"e":"0","queueId":"0"'),
        _patched_header(v2, b'"e":"0"', b'"e":"0","AccessKey":""'),
        _patched_header(v2, b'"opaque":9', b'"opaque":9,"remark":""'),
    ):
        check_parity([changed], 0)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_truncated_and_corrupted_cpp_sends(data: st.DataObject) -> None:
    """Cut or flipped bytes in C++-style frames (numbers, booleans, unknown keys, the newline)."""
    frames = [raw_frame(CPP_044_SEND, b"hello")] + [
        v1_frame(i, cpp_fields(unitMode=False, reconsumeTimes=None, queueId=str(i))) for i in range(3)
    ]
    check_cut_and_flipped(data, frames)
