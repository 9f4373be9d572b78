"""The client's C lane (``client_lane.c``) against the Python it replaces, on hypothesis-generated input.

* ``frame`` gives ``SendTemplate.frame_python``'s bytes (or None, leaving the frame to it);
* ``send_frame`` gives ``SendIds.at``'s id and ``frame_python``'s bytes of the properties prefix + that id;
* ``deliver`` takes an answer only if the Python walk (the msgspec decode of ``plain_header``, then
  ``answer_outcome``'s reading of a SUCCESS) reads it as a SUCCESS with the same ``msgId`` and
  ``int(queueOffset)``, and stops at every other frame, whole or mutated.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.client.send_frames import SendTemplate
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.plain_header import PLAIN_HEADER_ERRORS, decode_plain_header
from sparkmq.remoting import client_native

REPO = Path(__file__).resolve().parents[2]
needs_lane = pytest.mark.skipif(client_native.deliver is None, reason="the C lane is not built (or SPARKMQ_NATIVE=0)")

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
properties = st.lists(
    st.one_of(texts, st.sampled_from(["\x01", "\x02", '"', "\\", "\n", "\x00", "\x1f", "\x7f", "é", "😀"])), max_size=8
).map("".join)


@needs_lane
@settings(max_examples=300, deadline=None)
@given(
    group=texts,
    topic=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20),
    queue_id=st.integers(0, 1024),
    opaque=st.integers(0, 2**31 - 1),
    born_ms=st.integers(0, 2**63 - 1),
    sys_flag=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    props=properties,
    body=st.binary(max_size=64),
)
def test_frame_equals_the_python_reference(
    group: str, topic: str, queue_id: int, opaque: int, born_ms: int, sys_flag: int, flag: int, props: str, body: bytes
) -> None:
    template = SendTemplate(group, topic)
    expected = template.frame_python(queue_id, opaque, born_ms, props, body, sys_flag, flag)
    assert template.frame(queue_id, opaque, born_ms, props, body, sys_flag, flag) == expected


@needs_lane
def test_frame_leaves_what_it_cannot_render_to_python() -> None:
    assert client_native.frame is not None
    args: list[Any] = [b"{", b",", 1, 0, 2**64, 0, "p", b""]  # a number over int64
    assert client_native.frame(*args) is None
    with pytest.raises(UnicodeEncodeError):  # as str.encode raises for a lone surrogate
        client_native.frame(b"{", b",", 1, 0, 0, 0, "\ud800", b"")


@needs_lane
@settings(max_examples=300, deadline=None)
@given(
    queue_id=st.integers(0, 1024),
    opaque=st.integers(0, 2**31 - 1),
    born_ms=st.integers(0, 2**63 - 1),
    sys_flag=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    prefix=st.one_of(properties, st.sampled_from(["WAIT\x01true\x02UNIQ_KEY\x01", "WAIT\x01false\x02UNIQ_KEY\x01"])),
    head=st.one_of(
        st.text("0123456789ABCDEF", min_size=28, max_size=28),
        st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=60),
    ),
    counter=st.one_of(st.integers(0, 2**16 + 5), st.integers(0, 2**80)),
    body=st.binary(max_size=64),
)
def test_send_frame_equals_the_id_and_frame_of_the_python_reference(
    queue_id: int,
    opaque: int,
    born_ms: int,
    sys_flag: int,
    flag: int,
    prefix: str,
    head: str,
    counter: int,
    body: bytes,
) -> None:
    assert client_native.send_frame is not None
    template = SendTemplate("PID", "Topic")
    made = client_native.send_frame(
        SendTemplate.START_BYTES,
        template.middle_of(queue_id),
        opaque,
        sys_flag,
        born_ms,
        flag,
        prefix,
        head,
        counter,
        body,
    )
    unique_id = f"{head}{counter & 0xFFFF:04X}"  # SendIds.at's id of this head and counter
    assert made == (
        unique_id,
        template.frame_python(queue_id, opaque, born_ms, prefix + unique_id, body, sys_flag, flag),
    )


@needs_lane
def test_send_frame_leaves_what_it_cannot_render_to_python() -> None:
    assert client_native.send_frame is not None
    start, middle = SendTemplate.START_BYTES, SendTemplate("PID", "T").middle_of(0)
    assert client_native.send_frame(start, middle, 1, 0, 2**64, 0, "p", "HEAD", 0, b"") is None  # over int64
    assert client_native.send_frame(start, middle, 1, 0, 0, 0, "p", "HÉAD", 0, b"") is None  # not an ASCII head
    assert client_native.send_frame(start, middle, 1, 0, 0, 0, "p", "H" * 61, 0, b"") is None  # not an id head
    with pytest.raises(UnicodeEncodeError):  # as str.encode raises for a lone surrogate
        client_native.send_frame(start, middle, 1, 0, 0, 0, "\ud800", "HEAD", 0, b"")
    with pytest.raises(TypeError):
        client_native.send_frame(start, middle, 1, 0, 0, 0, "p", "HEAD", "0", b"")


class Recorder:
    def __init__(self) -> None:
        self.results: list[object] = []

    def done(self) -> bool:
        return False

    def set_result(self, result: object) -> None:
        self.results.append(result)


def framed(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def python_reading(header: bytes) -> tuple[int, tuple[str, int]] | None:
    """What the Python walk makes of ``header``: (opaque, (msgId, queueOffset)) of a SUCCESS, else None."""
    try:
        decoded = decode_plain_header(header)
    except PLAIN_HEADER_ERRORS:
        return None
    fields = decoded.ext_fields or {}
    if decoded.code != 0 or not decoded.flag & 1 or "msgId" not in fields:
        return None
    try:
        return decoded.opaque, (fields["msgId"], int(fields["queueOffset"]))
    except (KeyError, ValueError):
        return None


def c_reading(header: bytes, opaque: int) -> tuple[int, tuple[str, int]] | None:
    assert client_native.deliver is not None
    waiter, data = Recorder(), framed(header)
    position = client_native.deliver(data, 0, {opaque: waiter})
    if position == 0:
        assert waiter.results == []
        return None
    assert position == len(data) and len(waiter.results) == 1
    return opaque, waiter.results[0]  # type: ignore[return-value]


offsets = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.sampled_from(["007", "-0", " 5", "+5", "5_0", "", "1e3", "١٢", "99999999999999999999", "5 "]),
)
field_values = st.text(st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=40)  # past 8-byte blocks


@needs_lane
@settings(max_examples=400, deadline=None)
@given(
    code=st.sampled_from([0, 0, 0, 1, 10, 207]),
    opaque=st.integers(0, 2**31 - 1),
    msg_id=field_values,
    offset=offsets,
    extra=st.dictionaries(st.sampled_from(["queueId", "MSG_REGION", "TRACE_ON", "x"]), field_values, max_size=3),
    remark=st.one_of(st.none(), field_values),
    cut=st.integers(0, 400),
    flip=st.tuples(st.integers(0, 400), st.integers(0, 255)),
)
def test_deliver_takes_only_what_python_reads_as_the_same_success(
    code: int,
    opaque: int,
    msg_id: str,
    offset: str,
    extra: dict[str, str],
    remark: str | None,
    cut: int,
    flip: tuple[int, int],
) -> None:
    request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque)
    fields = {"msgId": msg_id, "queueOffset": offset, **extra}
    header = request.make_response(code, remark=remark, ext_fields=fields).encode()[8:]
    for candidate in (header, header[: min(cut, len(header))], _flipped(header, *flip)):
        taken = c_reading(candidate, opaque)
        if taken is not None:
            assert python_reading(candidate) == taken
    if code == 0 and remark is None and _compact(msg_id, *extra.values()) and _offset_text(offset):
        assert c_reading(header, opaque) == python_reading(header)  # the broker's own shape is taken


def _compact(*values: str) -> bool:
    """Text the C lane reads: printable ASCII without quotes or backslashes."""
    return all(v.isascii() and v.isprintable() and '"' not in v and "\\" not in v for v in values)


def _offset_text(offset: str) -> bool:
    digits = offset[1:] if offset.startswith("-") else offset
    return digits.isascii() and digits.isdigit() and len(digits) <= 18


def _flipped(header: bytes, at: int, value: int) -> bytes:
    at %= len(header)
    return header[:at] + bytes([value]) + header[at + 1 :]


@needs_lane
def test_deliver_stops_at_frames_it_does_not_take_and_for_waiters_it_does_not_hold() -> None:
    assert client_native.deliver is not None
    ok = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, 5).make_response(
        ext_fields={"msgId": "AB", "queueOffset": "3"}
    )
    busy = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, 6).make_response(ResponseCode.SYSTEM_BUSY, remark="b")
    stream = ok.encode() + busy.encode() + ok.encode()
    waiter = Recorder()
    assert client_native.deliver(stream, 0, {5: waiter, 6: Recorder()}) == len(ok.encode())
    assert waiter.results == [("AB", 3)]
    assert client_native.deliver(stream, 0, {}) == 0  # nobody waits lean for opaque 5: the Python path's
    with_body = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, 5).make_response(
        ext_fields={"msgId": "AB", "queueOffset": "3"}, body=b"x"
    )
    assert client_native.deliver(with_body.encode(), 0, {5: Recorder()}) == 0
    assert client_native.deliver(ok.encode()[:-1], 0, {5: Recorder()}) == 0  # unfinished


def test_the_client_lane_is_built_here_and_switched_off_by_sparkmq_native_0() -> None:
    assert client_native.BUILT, "run `python setup.py build_ext --inplace` (or `pip install -e .`)"
    probe = (
        "from sparkmq.remoting import client_native as c;"
        " print(c.BUILT, c.frame is None, c.send_frame is None, c.deliver is None)"
    )
    for value, expected in (("0", "True True True True"), ("1", "True False False False")):
        env = {**os.environ, "SPARKMQ_NATIVE": value, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True, check=True
        )
        assert out.stdout.split() == expected.split()


@needs_lane
def test_repeated_calls_keep_memory_flat() -> None:
    assert client_native.frame is not None and client_native.deliver is not None
    template = SendTemplate("PID", "Topic")
    answers = b"".join(
        RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque)
        .make_response(ext_fields={"msgId": "AB", "queueOffset": str(opaque)})
        .encode()
        for opaque in range(16)
    )

    def run(times: int) -> None:
        for i in range(times):
            template.frame(i % 4, i, 1_700_000_000_000, "WAIT\x01true\x02UNIQ_KEY\x01AB", b"body", 0, 0)
            made = client_native.send_frame(  # type: ignore[misc]
                SendTemplate.START_BYTES, template.middle_of(i % 4), i, 0, 1, 0, "WAIT", "AB" * 14, i, b"body"
            )
            assert made is not None
            lean = {opaque: Recorder() for opaque in range(16)}
            assert client_native.deliver(answers, 0, lean) == len(answers)

    run(2_000)  # warm up the allocator
    before = _rss_kib()
    run(20_000)
    assert _rss_kib() - before < 2_048


def _rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
