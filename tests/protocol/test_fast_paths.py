"""The per-request fast paths give what their reference paths give, errors included.

* ``command._decode_json_header`` (the msgspec typed decode of :mod:`sparkmq.protocol.plain_header`,
  falling back to the general decoder) vs ``command._decode_any_json_header`` (json, the reference);
* ``parse_send_request_header`` for SEND_MESSAGE_V2 (unrolled) vs the schema's
  ``SendMessageRequestHeaderV2.from_fields(...).to_v1()``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkmq.errors import InvalidFieldError, ProtocolError
from sparkmq.protocol import command
from sparkmq.protocol.command import (
    FAST_PATH_AFTER_HEADERS,
    _decode_any_json_header,
    _decode_json_header,
    _dumps_string_map,
    load_fast_path,
)
from sparkmq.protocol.headers import (
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
    parse_send_request_header,
    send_response_fields,
)
from sparkmq.protocol.plain_header import encode_string_map

# The fast path loads after FAST_PATH_AFTER_HEADERS decodes, or with the remoting layer: load it now, so that
# _decode_json_header below is the msgspec decode (and its fallback), compared with the reference.
assert load_fast_path() and command.decode_plain_header is not None

_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


def _command(decode, raw: bytes) -> object:
    try:
        command = decode(raw, b"body")
    except ProtocolError as exc:
        return ("ProtocolError", exc.remark)
    return (command, repr(command), None if command.defect is None else command.defect.remark)


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.text(max_size=6),
    st.sampled_from(
        [
            2**31 - 1,
            2**31,
            -(2**31),
            -(2**31) - 1,
            10.0,
            1e3,
            1.5,
            "10",
            "007",
            "JAVA",
            "CPP",
            "\ud800",
            "\x00",
            "\x01\x02",
        ]
    ),
)
_EXT = st.one_of(st.dictionaries(st.text(max_size=3), _SCALARS, max_size=4), _SCALARS)
_HEADERS = st.fixed_dictionaries(
    {},
    optional={
        key: _EXT if key == "extFields" else _SCALARS
        for key in ("code", "opaque", "flag", "version", "language", "remark", "extFields", "serializeTypeCurrentRPC")
    },
)


@_SETTINGS
@given(_HEADERS, st.booleans(), st.sampled_from(["", "\n", " "]))
def test_json_header_decode_matches_the_reference(header: dict[str, object], ascii_only: bool, tail: str) -> None:
    raw = (json.dumps(header, ensure_ascii=ascii_only) + tail).encode("utf-8", "surrogatepass")
    assert _command(_decode_json_header, raw) == _command(_decode_any_json_header, raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"code":1,"opaque":2,"code":3}',
        b'{"code":1,"opaque":2,"extFields":{"a":"1","a":"2"}}',
        b'{"code":1.0,"opaque":2}',
        b'{"code":1E2,"opaque":2}',
        b'{"code":-0,"opaque":2}',
        b'{"code":1,"opaque":2,"remark":"\\ud800"}',
        b'{"code":1,"opaque":2,"remark":"a\\u0000"}',
        b'{"code":1,"opaque":2,"extFields":{"\\uD800":"x"}}',
        b'{"code":1,"opaque":2,"extFields":{"i":"WAIT\\u0001true\\u0002"}}',
        b'{"code":1,"opaque":2} x',
        b'\xef\xbb\xbf{"code":1,"opaque":2}',
        b'{"code":1,"opaque":2,"remark":"\xff"}',
        b'{"code":1,"opaque":2,"skipped":"\xed\xa0\x80"}',
        b'{"code":1,"opaque":2,"x":' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_json_header_edge_cases_match_the_reference(raw: bytes) -> None:
    assert _command(_decode_json_header, raw) == _command(_decode_any_json_header, raw)


def _send_header(fields: dict[str, str], parse) -> object:
    try:
        return parse(fields)
    except InvalidFieldError as exc:
        return ("InvalidFieldError", exc.remark)


_VALUES = st.one_of(
    st.text(max_size=4),
    st.sampled_from(
        ["0", "1", "-1", "007", "true", "false", "TRUE", "1" * 10, "9" * 19, "²", "１", "", "+5", "2147483648"]
    ),
)


@_SETTINGS
@given(
    st.fixed_dictionaries({key: _VALUES for key in "abcdefgh"}, optional={key: _VALUES for key in "ijklmnz"}),
    st.sets(st.sampled_from("abcdefgh")),
)
def test_send_v2_header_parse_matches_the_schema(fields: dict[str, str], missing: set[str]) -> None:
    for key in missing:
        del fields[key]
    assert _send_header(fields, lambda f: parse_send_request_header(310, f)) == _send_header(
        fields, lambda f: SendMessageRequestHeaderV2.from_fields(f).to_v1()
    )


def test_commands_decode_without_msgspec() -> None:
    code = (
        "import sys; sys.modules['msgspec'] = None\n"
        "from sparkmq.protocol import RemotingCommand, command\n"
        "assert command.decode_plain_header is None and not command.load_fast_path()\n"
        "frame = RemotingCommand.request(310, 7, ext_fields={'a': 'P'}, body=b'x').encode()\n"
        "assert RemotingCommand.decode(frame[4:]).ext_fields == {'a': 'P'}\n"
        "response = RemotingCommand(10, ext_fields={'k': 'é'}).make_response(ext_fields={'k': 'é'})\n"
        "assert RemotingCommand.decode(response.encode()[4:]) == response\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2], timeout=60)


def test_the_fast_path_loads_once_it_pays_for_its_import() -> None:
    # Spark's per-query source runner exchanges ~100 headers: msgspec (and typing_extensions) stay unloaded.
    code = (
        "import sys\n"
        "from sparkmq.protocol import RemotingCommand, command\n"
        "frame = RemotingCommand(10, ext_fields={'k': 'v'}).make_response(ext_fields={'k': 'é'}).encode()[4:]\n"
        "decoded = [RemotingCommand.decode(frame) for _ in range(FAST - 1)]\n"
        "assert 'msgspec' not in sys.modules and command.decode_plain_header is None\n"
        "decoded.append(RemotingCommand.decode(frame))\n"
        "assert 'msgspec' in sys.modules and command.decode_plain_header is not None\n"
        "decoded.append(RemotingCommand.decode(frame))\n"
        "assert all(d == decoded[0] for d in decoded) and decoded[0].ext_fields == {'k': 'é'}\n"
    ).replace("FAST", str(FAST_PATH_AFTER_HEADERS))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2], timeout=60)


def test_the_remoting_layer_loads_the_fast_path_at_once() -> None:
    code = (
        "import sys\n"
        "from sparkmq.protocol import command\n"
        "assert 'msgspec' not in sys.modules and command.decode_plain_header is None\n"
        "import sparkmq.remoting\n"
        "assert command.decode_plain_header is not None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2], timeout=60)


@_SETTINGS
@given(st.dictionaries(st.text(), st.text(), max_size=6))
def test_ext_fields_encode_matches_the_reference(fields: dict[str, str]) -> None:
    def encoded(encode) -> object:
        try:
            return encode(fields)
        except UnicodeEncodeError:
            return UnicodeEncodeError

    assert encoded(encode_string_map) == encoded(_dumps_string_map)


@pytest.mark.parametrize(("region", "trace"), [("DefaultRegion", True), ("R", False), (None, True), ("R", None)])
def test_send_response_fields_match_the_header(region: str | None, trace: bool | None) -> None:
    header = SendMessageResponseHeader("7F00000100002A9F0000000000000400", 3, 17, None, region, trace)
    assert send_response_fields(header.msg_id, 3, 17, region, trace) == header.to_fields()
