"""RemotingCommand: exact JSON header bytes, decoding tolerance, the binary ROCKETMQ header."""

from __future__ import annotations

import json
import struct

import pytest

from sparkmq.errors import FrameTooLargeError, ProtocolError
from sparkmq.protocol import (
    MAX_FRAME_BYTES,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode_frame,
)


def json_frame(header: bytes | str, body: bytes = b"", serialize_type: int = 0) -> bytes:
    raw = header.encode("utf-8") if isinstance(header, str) else header
    return struct.pack(">II", 4 + len(raw) + len(body), (serialize_type << 24) | len(raw)) + raw + body


def raises_exactly(exc_type: type[Exception], frame: bytes, match: str) -> None:
    with pytest.raises(exc_type, match=match) as info:
        decode_frame(frame)
    assert type(info.value) is exc_type


# --- encoding --------------------------------------------------------------------------------


def test_error_response_header_bytes_with_remark() -> None:
    request = RemotingCommand(code=999, opaque=5, language=LanguageCode.CPP, version=63)
    response = request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark=" request type 999 not supported")
    header = (
        b'{"code":3,"flag":1,"language":"JAVA","opaque":5,"remark":" request type 999 not supported",'
        b'"serializeTypeCurrentRPC":"JSON","version":407,"extFields":{}}'
    )
    assert response.encode() == struct.pack(">II", 4 + len(header), len(header)) + header


def test_make_response_is_json_java_response_with_same_opaque() -> None:
    request = RemotingCommand(
        code=RequestCode.PULL_MESSAGE,
        opaque=77,
        flag=2,
        language=LanguageCode.CPP,
        version=63,
        remark="",
        ext_fields={"topic": "T"},
        body=b"x",
        serialize_type=SerializeType.ROCKETMQ,
    )
    response = request.make_response(ResponseCode.PULL_NOT_FOUND, ext_fields={"nextBeginOffset": "3"})
    assert response == RemotingCommand(
        code=19, opaque=77, flag=1, remark=None, ext_fields={"nextBeginOffset": "3"}, body=b""
    )
    assert response.is_response and not response.is_oneway
    assert response.language is LanguageCode.JAVA and response.version == 407
    assert response.serialize_type is SerializeType.JSON
    assert response.encode()[4:8] == struct.pack(">I", len(response.encode()) - 8)  # type byte 0


def test_request_helper_marks_oneway() -> None:
    oneway = RemotingCommand.request(
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 3, ext_fields={"consumerGroup": "g"}, oneway=True
    )
    assert (oneway.code, oneway.flag, oneway.is_oneway, oneway.is_response) == (40, 2, True, False)
    assert RemotingCommand.request(34, 1).flag == 0


def test_extfields_always_present_and_values_as_strings() -> None:
    frame = RemotingCommand(code=0, opaque=1, flag=1).encode()
    assert b'"extFields":{}' in frame
    header = json.loads(frame[8:])
    assert header["extFields"] == {}


def test_encode_parts_keeps_body_separate() -> None:
    cmd = RemotingCommand(code=0, opaque=1, flag=1, body=b"\x00body")
    head, body = cmd.encode_parts()
    assert body is cmd.body
    assert head + body == cmd.encode()
    assert struct.unpack(">I", head[:4])[0] == len(head) - 4 + len(body)


def test_non_ascii_is_raw_utf8_and_control_chars_escaped() -> None:
    cmd = RemotingCommand(code=10, opaque=1, ext_fields={"properties": "TAGS\x01标签\x02"}, remark="é")
    frame = cmd.encode()
    assert '"remark":"é"'.encode() in frame
    assert '"properties":"TAGS\\u0001标签\\u0002"'.encode() in frame
    assert decode_frame(frame) == cmd


def test_ext_values_must_be_strings() -> None:
    with pytest.raises(TypeError, match="nextBeginOffset"):
        RemotingCommand(code=0, opaque=1, ext_fields={"nextBeginOffset": 1}).encode()


@pytest.mark.parametrize("field", ["code", "opaque", "flag", "version"])
def test_header_ints_must_be_int32(field: str) -> None:
    values: dict[str, int] = {"code": 0, "opaque": 0, "flag": 0, "version": 0, field: 2**31}
    with pytest.raises(ValueError, match=field):
        RemotingCommand(**values).encode()


def test_encode_refuses_frames_over_the_maximum() -> None:
    with pytest.raises(FrameTooLargeError):
        RemotingCommand(code=0, opaque=1, body=bytes(MAX_FRAME_BYTES)).encode()


@pytest.mark.parametrize("binary", [False, True])
def test_a_lone_surrogate_is_escaped_on_encode_never_an_error(binary: bool) -> None:
    command = RemotingCommand(code=17, opaque=1, remark="Nope\ud800", ext_fields={"topic\udfff": "T\ud800"})
    frame = command.encode_rocketmq() if binary else command.encode()
    decoded = RemotingCommand.decode(frame[4:])
    assert (decoded.remark, decoded.ext_fields) == ("Nope\\ud800", {"topic\\udfff": "T\\ud800"})
    assert decoded.defect is None


def _json_request(ext_json: str, remark: str = "null") -> bytes:
    header = (
        f'{{"code":17,"flag":0,"language":"JAVA","opaque":42,"remark":{remark},"version":0,"extFields":{ext_json}}}'
    ).encode()
    return struct.pack(">I", len(header)) + header


@pytest.mark.parametrize(
    ("ext_json", "remark", "expected"),
    [
        ('{"topicFilterType":"\\ud800"}', "null", "'topicFilterType' holds a lone surrogate U+D800 at index 0"),
        ('{"topic":"a\\u0000b"}', "null", "'topic' holds a NUL character at index 1"),
        ('{"topic":"%s"}' % ("x" * 40_000), "null", "'topic' is 40000 characters long, over the limit of 32767"),
        ('{"a\\udc00":"v"}', "null", "header field name 'a\\udc00' holds a lone surrogate"),
        ("{}", '"\\udbff"', "'remark' holds a lone surrogate U+DBFF"),
    ],
)
def test_unfit_request_text_is_a_defect_naming_the_field(ext_json: str, remark: str, expected: str) -> None:
    command = RemotingCommand.decode(_json_request(ext_json, remark))
    assert command.opaque == 42 and command.defect is not None
    assert expected in command.defect.remark
    command.make_response(command.defect.code, remark=command.defect.remark).encode()  # always answerable


def test_unfit_text_in_a_binary_header_is_a_defect() -> None:
    frame = RemotingCommand(code=10, opaque=3, ext_fields={"topic": "a\x00"}).encode_rocketmq()
    defect = RemotingCommand.decode(frame[4:]).defect
    assert defect is not None and defect.field == "topic"


def test_fit_text_has_no_defect_and_responses_are_never_checked() -> None:
    assert RemotingCommand.decode(_json_request('{"topic":"caf\\u00e9 \\ud83d\\ude00"}')).defect is None
    response = RemotingCommand(code=0, opaque=1, flag=1, remark="x\x00").encode()
    assert RemotingCommand.decode(response[4:]).defect is None


@pytest.mark.parametrize("digits", ["9" * 5000, "-" + "1" * 4400, "0" * 5000 + "7"])
def test_huge_integer_strings_are_protocol_errors_not_value_errors(digits: str) -> None:
    header = (f'{{"code":"{digits}","opaque":1}}').encode()
    payload = struct.pack(">I", len(header)) + header
    if digits.lstrip("0") == "7":
        assert RemotingCommand.decode(payload).code == 7
    else:
        with pytest.raises(ProtocolError, match="'code' is not an int32"):
            RemotingCommand.decode(payload)


def test_repr_shows_body_size_not_body() -> None:
    text = repr(RemotingCommand(code=11, opaque=2, body=b"x" * 1000))
    assert "body=<1000 bytes>" in text and "request code=11" in text


# --- JSON decoding ---------------------------------------------------------------------------


def test_ext_values_normalised_to_strings() -> None:
    header = (
        '{"code":10,"opaque":1,"extFields":{"s":"x","i":4,"neg":-1,"big":1795237382586,"t":true,"f":false,'
        '"whole":4.0,"exp":1e3,"frac":1.5,"gone":null}}'
    )
    cmd = decode_frame(json_frame(header))
    assert cmd.ext_fields == {
        "s": "x",
        "i": "4",
        "neg": "-1",
        "big": "1795237382586",
        "t": "true",
        "f": "false",
        "whole": "4",
        "exp": "1000",
        "frac": "1.5",
    }


def test_json_header_defaults_and_tolerance() -> None:
    cmd = decode_frame(json_frame('{"code":"105","opaque":3}\n'))
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.version) == (105, 3, 0, 0)
    assert cmd.language is LanguageCode.JAVA and cmd.remark is None and cmd.ext_fields == {}
    assert decode_frame(json_frame('{"code":1,"opaque":3,"extFields":null,"remark":null}')).ext_fields == {}


@pytest.mark.parametrize(
    ("value", "expected"),
    [('"GO"', LanguageCode.GO), ('"NODE"', LanguageCode.OTHER), ("1", LanguageCode.CPP), ("99", LanguageCode.OTHER)],
)
def test_language_names_ordinals_and_unknowns(value: str, expected: LanguageCode) -> None:
    assert decode_frame(json_frame(f'{{"code":1,"opaque":1,"language":{value}}}')).language is expected


@pytest.mark.parametrize(
    ("header", "match"),
    [
        ('{"opaque":1}', "no 'code'"),
        ('{"code":1}', "no 'opaque'"),
        ('{"code":true,"opaque":1}', "'code' is not an int32"),
        ('{"code":1.5,"opaque":1}', "'code' is not an int32"),
        ('{"code":1,"opaque":2147483648}', "'opaque' is not an int32"),
        ('{"code":1,"opaque":1,"flag":"x"}', "'flag' is not an int32"),
        ('{"code":1,"opaque":1,"language":[]}', "'language'"),
        ('{"code":1,"opaque":1,"extFields":[]}', "extFields is a JSON list"),
        ('{"code":1,"opaque":1,"extFields":{"k":{"a":1}}}', "'k' is a JSON dict"),
        ('{"code":1,"opaque":1,"extFields":{"k":NaN}}', "not valid JSON"),
        ('{"code":1,"opaque":1,"remark":{}}', "'remark'"),
        ("[1,2]", "not an object"),
        ('{"code":1,', "not valid JSON"),
        ("", "not valid JSON"),
        ("[" * 100000 + "]" * 100000, "not valid JSON"),
    ],
)
def test_bad_json_headers(header: str, match: str) -> None:
    raises_exactly(ProtocolError, json_frame(header), match)


def test_non_utf8_json_header() -> None:
    raises_exactly(ProtocolError, json_frame(b'{"code":1,"opaque":1,"remark":"\xff"}'), "not UTF-8")


def test_header_length_larger_than_frame() -> None:
    frame = struct.pack(">II", 4 + 2, 50) + b"{}"
    raises_exactly(ProtocolError, frame, "header length 50 exceeds")


@pytest.mark.parametrize("serialize_type", [2, 0x7F, 0xFF])
def test_unknown_serialize_type(serialize_type: int) -> None:
    raises_exactly(
        ProtocolError, json_frame('{"code":1,"opaque":1}', serialize_type=serialize_type), "unknown serialize type"
    )


def test_decode_payload_without_room_for_header_length() -> None:
    with pytest.raises(ProtocolError, match="no header-length field"):
        RemotingCommand.decode(b"\x00\x00")


# --- ROCKETMQ binary header ------------------------------------------------------------------

# code 10, JAVA, version 407, opaque 5, flag 0, no remark, extFields {"topic": "T"}, body "x".
BINARY_FRAME = bytes.fromhex(
    "00000026"  # length = 4 + 33 + 1
    "01000021"  # serialize type 1, header length 33
    "000a"
    "00"
    "0197"
    "00000005"
    "00000000"  # code, language, version, opaque, flag
    "00000000"  # remark length 0 (null)
    "0000000c"
    "0005"
    "746f706963"
    "00000001"
    "54"  # extFields: "topic" -> "T"
    "78"  # body
)


def test_binary_header_exact_bytes_both_ways() -> None:
    cmd = RemotingCommand(code=10, opaque=5, ext_fields={"topic": "T"}, body=b"x")
    assert cmd.encode_rocketmq() == BINARY_FRAME
    decoded = decode_frame(BINARY_FRAME)
    assert decoded == RemotingCommand(
        code=10, opaque=5, ext_fields={"topic": "T"}, body=b"x", serialize_type=SerializeType.ROCKETMQ
    )


def test_binary_round_trip_with_remark_unicode_and_many_fields() -> None:
    ext = {f"k{i}": "v" * i for i in range(20)} | {"ключ": "значение"}
    cmd = RemotingCommand(
        code=310, language=LanguageCode.GO, version=-5, opaque=-7, flag=2, remark="ok ✓", ext_fields=ext
    )
    decoded = decode_frame(cmd.encode_rocketmq())
    assert decoded.serialize_type is SerializeType.ROCKETMQ
    assert (decoded.code, decoded.language, decoded.version, decoded.opaque, decoded.flag) == (
        310,
        LanguageCode.GO,
        -5,
        -7,
        2,
    )
    assert decoded.remark == "ok ✓" and decoded.ext_fields == ext
    # Its response goes out as JSON, whatever the request used.
    assert decode_frame(decoded.make_response().encode()).serialize_type is SerializeType.JSON


def test_binary_empty_remark_decodes_as_none_and_unknown_language_as_other() -> None:
    frame = RemotingCommand(code=1, opaque=1, remark="").encode_rocketmq()
    assert decode_frame(frame).remark is None
    patched = bytearray(frame)
    patched[10] = 200  # language byte
    assert decode_frame(bytes(patched)).language is LanguageCode.OTHER


def test_binary_header_refused_for_responses_and_int16_overflow() -> None:
    with pytest.raises(ValueError, match="JSON"):
        RemotingCommand(code=0, opaque=1, flag=1).encode_rocketmq()
    with pytest.raises(ValueError, match="int16"):
        RemotingCommand(code=40000, opaque=1).encode_rocketmq()


def _binary(header: bytes) -> bytes:
    return json_frame(header, serialize_type=1)


@pytest.mark.parametrize("cut", range(0, 33))
def test_truncated_binary_header(cut: int) -> None:
    header = BINARY_FRAME[8:-1][:cut]
    with pytest.raises(ProtocolError) as info:
        decode_frame(_binary(header))
    assert type(info.value) is ProtocolError
    assert "ROCKETMQ" in str(info.value)


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (struct.pack(">hBhiii", 1, 0, 1, 1, 0, -1) + struct.pack(">i", 0), "remark of -1 bytes"),
        (struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", 2) + struct.pack(">h", -1), "truncated"),
        (
            struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", 7) + b"\x00\x01k" + b"\xff\xff\xff\xff",
            "value of -1",
        ),
        (struct.pack(">hBhiii", 1, 0, 1, 1, 0, 0) + struct.pack(">i", 0) + b"junk", "trailing"),
        (struct.pack(">hBhiii", 1, 0, 1, 1, 0, 1) + b"\xff" + struct.pack(">i", 0), "not UTF-8"),
    ],
)
def test_malformed_binary_headers(header: bytes, match: str) -> None:
    raises_exactly(ProtocolError, _binary(header), match)
