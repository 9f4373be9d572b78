"""native/clientframes.c against its Python references: a producer's send frame and a read's plain answers.

``render`` must give ``SendTemplate.frame``'s bytes (or None, leaving the frame to the f-string). ``answers``
must take, from a read, exactly the leading whole frames whose header has the strict plain shape
(:func:`strict_plain`, the grammar the C reads) and give for each what ``decode_plain_header`` gives; on
damaged input it takes only such frames and never reads outside the buffer (`make native-check` runs this
under AddressSanitizer and UBSan).
"""

from __future__ import annotations

import json
import re
import struct
from json.encoder import encode_basestring
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.client import send_frames
from sparkmq.client.send_frames import SendTemplate
from sparkmq.protocol import RESPONSE_FLAG
from sparkmq.protocol.codes import MAX_FRAME_BYTES
from sparkmq.protocol.plain_header import PLAIN_HEADER_ERRORS, PlainHeader, decode_plain_header
from sparkmq.remoting.client_connection import decode_plain_header as decode_lean

from .test_damaged_input import damaged

native = pytest.importorskip("sparkmq.native._clientframes")

_INTS = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**63 - 1]))
_TEXT = st.text(max_size=40)


def python_frame(template: SendTemplate, *args: Any) -> bytes:
    saved, send_frames._native = send_frames._native, None
    try:
        return template.frame(*args)
    finally:
        send_frames._native = saved


@settings(max_examples=300)
@given(
    st.text(min_size=1, max_size=20),
    st.text(min_size=1, max_size=20),
    st.sampled_from([310, 320]) | _INTS,
    _INTS,
    _INTS,
    _INTS,
    _INTS,
    _INTS,
    _TEXT,
    st.binary(max_size=300),
    st.booleans(),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=32),
    st.integers(-3, 0x10002) | st.sampled_from([-1, 0, 0xFFFF, 0x10000]) | _INTS,
)
def test_render_gives_the_templates_bytes(
    group: str,
    topic: str,
    code: int,
    queue_id: int,
    opaque: int,
    born_ms: int,
    sys_flag: int,
    flag: int,
    properties: str,
    body: bytes,
    oneway: bool,
    id_head: str,
    id_tail: int,
) -> None:
    template = SendTemplate(group.replace("\ud800", "x"), topic)
    escaped = encode_basestring(properties)
    if id_tail >= 0:
        escaped = escaped[:-1]  # the JSON string's text up to the id (id_head, id_tail's digits), as PLAIN_JSON
    args = (code, queue_id, opaque, born_ms, escaped, body, sys_flag, flag, oneway, None, id_head, id_tail)
    expected = python_frame(template, *args)
    assert template.frame(*args) == expected
    rendered = native.render(
        code, 2 if oneway else 0, opaque, template._fields_bytes, queue_id, sys_flag, born_ms, flag, escaped,
        id_head, id_tail, code == 320, body,
    )  # fmt: skip
    assert rendered is None or rendered == expected
    if all(-(2**63) <= value < 2**63 for value in (code, queue_id, opaque, born_ms, sys_flag, flag)) and (
        -(2**63) <= id_tail <= 0xFFFF
    ):
        assert rendered is not None
    if id_tail >= 0:
        assert f'"i":{escaped}{id_head}{id_tail:04X}"'.encode() in expected


def test_render_leaves_bools_and_lone_surrogates_as_python_has_them() -> None:
    template = SendTemplate("PID", "T")
    assert native.render(310, 0, True, template._fields_bytes, 1, 0, 1, 0, '"p"', "", -1, False, b"") is None
    assert native.render(310, 0, 1, template._fields_bytes, 1, 0, 1, 0, '"p', "ID", True, False, b"") is None
    with pytest.raises(UnicodeEncodeError):
        native.render(310, 0, 1, template._fields_bytes, 1, 0, 1, 0, '"\ud800"', "", -1, False, b"")
    with pytest.raises(UnicodeEncodeError):
        native.render(310, 0, 1, template._fields_bytes, 1, 0, 1, 0, '"p', "\ud800", 1, False, b"")
    with pytest.raises(TypeError):
        native.render(310, 0, 1, template._fields_bytes, 1, 0, 1, 0, '"p', b"ID", 1, False, b"")
    with pytest.raises(UnicodeEncodeError):
        python_frame(template, 310, 1, 1, 1, '"\ud800"', b"", 0, 0)


def test_a_frame_over_the_maximum_is_refused_both_ways() -> None:
    template, body = SendTemplate("PID", "T"), bytes(MAX_FRAME_BYTES)
    with pytest.raises(Exception, match="exceeds") as native_error:
        template.frame(310, 1, 1, 1, '"p"', body, 0, 0)
    with pytest.raises(Exception, match="exceeds") as python_error:
        python_frame(template, 310, 1, 1, 1, '"p"', body, 0, 0)
    assert type(native_error.value) is type(python_error.value)
    # the C leaves a frame over the maximum to the f-string, which refuses it; one at the maximum is its own
    args: tuple[Any, ...] = (310, 0, 1, template._fields_bytes, 1, 0, 1, 0, '"p"', "", -1, False)
    at_most = len(template.frame(310, 1, 1, 1, '"p"', b"", 0, 0))
    assert native.render(*args, bytes(MAX_FRAME_BYTES - at_most + 1)) is None
    assert len(native.render(*args, bytes(MAX_FRAME_BYTES - at_most))) == MAX_FRAME_BYTES


# -- answers -------------------------------------------------------------------------------------------------

_STR = r'"[\x20\x21\x23-\x5b\x5d-\x7e]*"'
_INT = r"-?(?:0|[1-9][0-9]*)"
_MEMBER = re.compile(
    rf'"(code|opaque|flag|version)":{_INT}|"(language|remark|serializeTypeCurrentRPC)":{_STR}'
    rf'|"(extFields)":\{{(?:{_STR}:{_STR}(?:,{_STR}:{_STR})*)?\}}'
)
_HEADER = re.compile(rf"\{{(?:{_MEMBER.pattern})(?:,(?:{_MEMBER.pattern}))*\}}")


def strict_plain(header: bytes) -> PlainHeader | None:
    """The reference of what the C takes: compact ASCII JSON without escapes, PlainHeader's keys (and
    serializeTypeCurrentRPC) each once, code and opaque present, int32 numbers, the flag's response bit set;
    decoded as the client does."""
    text = header.decode("latin-1")
    if not _HEADER.fullmatch(text):
        return None
    keys = [key for key, _ in json.loads(text, object_pairs_hook=lambda pairs: pairs)]
    if len(set(keys)) != len(keys) or not {"code", "opaque"} <= set(keys):
        return None
    try:
        decoded = decode_plain_header(header)
    except PLAIN_HEADER_ERRORS:
        return None
    return decoded if decoded.flag & RESPONSE_FLAG else None


def frame(header: bytes) -> bytes:
    return struct.pack(">II", len(header) + 4, len(header)) + header


def check_answers(data: bytes, position: int = 0) -> None:
    """The C's answers from ``position`` are the strict plain frames of the reference, in order, up to the first
    frame it does not take, and its end is where the last of them ends; each with a send answer's two extFields
    values as the client's decode (``LeanResponse``) reads them, and its extFields read from the read's bytes or,
    for a buffer that may change, from a copy."""
    start, expected, raws = position, [], []
    while len(data) - position >= 8:
        length, header_length = struct.unpack_from(">II", data, position)
        end = position + 8 + header_length
        if length != header_length + 4 or end > len(data):
            break
        header = strict_plain(data[position + 8 : end])
        if header is None:
            break
        expected.append((end, header))
        raws.append(data[position + 8 : end])
        position = end
    end, got = native.answers(data, start)
    assert [PlainHeader(*answer) for answer in got] == [header for _, header in expected]
    assert end == (expected[-1][0] if expected else start)
    lean = [decode_lean(raw) for raw in raws]
    assert [(answer.msg_id, answer.queue_offset) for answer in got] == [(a.msg_id, a.queue_offset) for a in lean]
    changing = bytearray(data)
    _, copied = native.answers(changing, start)
    changing[:] = bytes(len(changing))  # the answers' extFields were copied: what the buffer holds later is not read
    assert [answer.ext_fields for answer in copied] == [header.ext_fields for _, header in expected]


_VALUE = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
_ANY_TEXT = st.one_of(_VALUE, st.text(max_size=8))
_SEND_KEYS = st.sampled_from(["msgId", "queueOffset"])  # the keys an Answer reads out


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    """A response header as brokers write it, in any key order, sometimes with what the C leaves to Python
    (escapes, non-ASCII, spaces, unknown or repeated keys, floats, null, numbers beyond int32)."""
    members: list[tuple[str, Any]] = [("code", draw(_INTS)), ("opaque", draw(_INTS))]
    for key, value in (
        ("flag", st.integers(0, 3) | _INTS),
        ("version", st.just(407) | _INTS),
        ("language", st.just("JAVA") | _ANY_TEXT | st.none()),
        ("remark", _ANY_TEXT | st.none()),
        ("serializeTypeCurrentRPC", st.just("JSON") | st.integers()),
        ("extFields", st.dictionaries(_SEND_KEYS | _ANY_TEXT, _ANY_TEXT, max_size=5) | st.none()),
        ("other", st.integers()),
    ):
        if draw(st.booleans()):
            members.append((key, draw(value)))
    members = draw(st.permutations(members))
    if draw(st.integers(0, 9)) == 0:
        members = members[1:]
    if draw(st.integers(0, 9)) == 0:
        members.append(members[0])
    separators = (", ", ": ") if draw(st.integers(0, 9)) == 0 else (",", ":")
    text = "{" + separators[0].join(f"{json.dumps(k)}{separators[1]}{json.dumps(v)}" for k, v in members) + "}"
    return text.encode()


@settings(max_examples=300)
@given(st.lists(headers(), min_size=1, max_size=6), st.integers(0, 8))
def test_answers_take_what_the_reference_takes(heads: list[bytes], cut: int) -> None:
    data = b"".join(frame(header) for header in heads)
    check_answers(data)
    check_answers(data[: max(len(data) - cut, 0)])
    for header in heads:
        _, taken = native.answers(frame(header), 0)
        if taken:  # a header the C takes decodes so in the client's path, with the same fields, by name too
            decoded = decode_plain_header(header)
            assert PlainHeader(*taken[0]) == decoded
            assert [getattr(taken[0], name) for name in PlainHeader.__struct_fields__] == list(taken[0])


_BROKER_ANSWER = (
    b'{"code":0,"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":407,'
    b'"extFields":{"msgId":"7F0000010000B1FB00000000000002EB","queueId":"1","queueOffset":"5"}}'
)


@settings(max_examples=500, deadline=None)
@given(st.lists(headers(), max_size=3).flatmap(lambda heads: damaged(b"".join(map(frame, [_BROKER_ANSWER, *heads])))))
def test_damaged_answers_are_taken_only_when_intact(data: bytes) -> None:
    check_answers(data)


def test_answers_start_at_the_position_and_refuse_one_outside() -> None:
    data = frame(_BROKER_ANSWER) * 2
    assert [(end, len(taken)) for end, taken in [native.answers(data, 0), native.answers(data, len(data) // 2)]] == [
        (len(data), 2),
        (len(data), 1),
    ]
    assert native.answers(data, len(data)) == (len(data), [])
    assert native.answers(data, len(data) + 1) == (len(data) + 1, [])
    assert native.answers(data, -1) == (-1, [])
    assert native.answers(memoryview(data), 0) == native.answers(data, 0)


def test_answers_stop_at_a_request() -> None:
    """A request from the broker (the flag's response bit clear) ends the run: the Python path serves it."""
    request = _BROKER_ANSWER.replace(b'"flag":1', b'"flag":0')
    data = frame(_BROKER_ANSWER) + frame(request) + frame(_BROKER_ANSWER)
    assert native.answers(data, 0) == (len(frame(_BROKER_ANSWER)), [native.answers(frame(_BROKER_ANSWER), 0)[1][0]])


def test_every_byte_at_every_place_of_a_text_block_is_taken_as_the_reference_takes_it() -> None:
    """The C scans a string's text in blocks of bytes: any byte, at any place of a block, is judged as the
    reference judges it."""
    for byte in range(256):
        for place in range(17):  # every place of two 8-byte blocks
            text = b"v" * place + bytes([byte]) + b"w" * (16 - place)
            check_answers(frame(b'{"code":0,"flag":1,"opaque":5,"extFields":{"msgId":"' + text + b'"}}'))


def test_a_repeated_send_field_reads_as_its_last_value_both_ways() -> None:
    header = b'{"code":0,"flag":1,"opaque":5,"extFields":{"msgId":"A","queueOffset":"1","msgId":"B","queueOffset":"2"}}'
    check_answers(frame(header))
    assert [(a.msg_id, a.queue_offset) for a in native.answers(frame(header), 0)[1]] == [("B", "2")]


def test_an_answer_is_read_only() -> None:
    (answer,) = native.answers(frame(_BROKER_ANSWER), 0)[1]
    assert (answer.code, answer.opaque, answer.flag, answer.msg_id, answer.queue_offset) == (
        0, 5, 1, "7F0000010000B1FB00000000000002EB", "5",
    )  # fmt: skip
    assert answer.ext_fields is answer.ext_fields and answer.ext_fields["queueOffset"] == "5"  # built once
    assert len(answer) == 7 and repr(answer).startswith("Answer(code=0, opaque=5,")
    with pytest.raises(AttributeError):
        answer.code = 1  # type: ignore[misc]
