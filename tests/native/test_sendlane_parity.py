"""The native send lane against the Python reference, byte for byte.

For every frame the lane takes, its CommitLog record, ConsumeQueue columns, index keys and
response frame equal what the Python decoder and encoders make of the same frame
(support/native_lane.py); every frame it declines is left whole to the Python path, which
then answers it (malformed input gets the reference's precise error, tests/native/test_lane_broker.py).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sparkmq.protocol import RemotingCommand, RequestCode
from support.native_lane import check_cut_and_flipped, check_parity, scan, send_frame

pytest.importorskip("sparkmq.native._sendlane")


def patched(frame: bytes, old: bytes, new: bytes) -> bytes:
    """``frame`` with ``old`` replaced by ``new`` in its header, both length fields fixed."""
    header_length = int.from_bytes(frame[4:8]) & 0xFFFFFF
    header = frame[8 : 8 + header_length]
    assert header.count(old) == 1 or old not in header, old
    if old in header:
        header = header.replace(old, new)
        body = frame[8 + header_length :]
    else:  # a marker past the header: the whole payload
        payload = frame[4:].replace(old, new)
        return (len(payload)).to_bytes(4) + payload
    return (4 + len(header) + len(body)).to_bytes(4) + (frame[4] << 24 | len(header)).to_bytes(4) + header + body


# Text the Python path stores as it is: no NUL (a defect), no surrogate (not encodable).
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
_TOPIC = st.text("abcXYZ019_-%|", min_size=1, max_size=30).filter(lambda t: not t.startswith(("%RETRY%", "%DLQ%")))
_INT32_TEXT = st.one_of(st.integers(0, 2**31 - 1).map(str), st.integers(0, 999).map(lambda v: f"{v:012d}"))


@st.composite
def plain_sends(draw: st.DrawFn) -> list[bytes]:
    frames = []
    for opaque in range(draw(st.integers(1, 12))):
        props = draw(
            st.one_of(
                st.none(),
                _TEXT,  # any text, separators included
                st.builds(
                    lambda tags, keys, uniq, other: "\x02".join(
                        [f"TAGS\x01{tags}", f"KEYS\x01{keys}", f"UNIQ_KEY\x01{uniq}", f"X\x01{other}"]
                    ),
                    _TEXT,
                    st.lists(_TEXT.filter(lambda k: "\x02" not in k), max_size=4).map(" ".join),
                    _TEXT,
                    _TEXT,
                ),
            )
        )
        assume(props is None or ("DELAY\x01" not in props and "TRAN_MSG\x01" not in props))
        frames.append(
            send_frame(
                draw(st.integers(-(2**31), 2**31 - 1)),
                topic=draw(_TOPIC),
                queue_id=str(draw(st.integers(0, 7))),
                body=draw(st.binary(max_size=300)),
                properties=props,
                sys_flag=str(draw(st.sampled_from([0, 1, 2, 3, 0x10, 0x20, 0x33]))),
                flag=draw(_INT32_TEXT),
                born=str(draw(st.integers(0, 2**63 - 1))),
                reconsume=draw(st.one_of(st.none(), st.integers(0, 10**9 - 1).map(str))),
            )
        )
        del opaque
    return frames


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plain_sends())
def test_plain_sends_match_the_python_encoders(frames: list[bytes]) -> None:
    check_parity(frames, len(frames))


@pytest.mark.parametrize(
    "declined",
    [
        pytest.param(send_frame(9, properties="DELAY\x013"), id="delay level"),
        pytest.param(send_frame(9, properties="TRAN_MSG\x01true"), id="transaction property"),
        pytest.param(send_frame(9, sys_flag="4"), id="prepared sysFlag"),
        pytest.param(send_frame(9, sys_flag="8"), id="commit sysFlag"),
        pytest.param(send_frame(9, extra={"m": "true"}), id="batch flag"),
        pytest.param(send_frame(9, extra={"m": "TRUE"}), id="odd batch flag"),
        pytest.param(send_frame(9, extra={"k": "yes"}), id="odd unit mode"),
        pytest.param(send_frame(9, code=RequestCode.SEND_BATCH_MESSAGE), id="batch code"),
        pytest.param(send_frame(9, code=RequestCode.SEND_MESSAGE), id="v1 code"),
        pytest.param(send_frame(9, topic="%RETRY%G"), id="retry topic"),
        pytest.param(send_frame(9, topic="%DLQ%G"), id="dlq topic"),
        pytest.param(send_frame(9, topic="SCHEDULE_TOPIC_XXXX"), id="schedule topic"),
        pytest.param(send_frame(9, topic="T" * 128), id="topic too long"),
        pytest.param(send_frame(9, topic=""), id="empty topic"),
        pytest.param(send_frame(9, queue_id="-1"), id="random queue"),
        pytest.param(send_frame(9, queue_id="+1"), id="signed queue id"),
        pytest.param(send_frame(9, queue_id="2147483648"), id="queue id over int32"),
        pytest.param(send_frame(9, queue_id="x"), id="bad queue id"),
        pytest.param(send_frame(9, born="9" * 19), id="born timestamp over int64"),
        pytest.param(send_frame(9, reconsume=""), id="empty reconsume"),
        pytest.param(send_frame(9, properties="A\x01\x00"), id="NUL"),
        pytest.param(patched(send_frame(9, properties="A\x01@"), b"@", b"\\ud800"), id="lone surrogate"),
        pytest.param(patched(send_frame(9, properties="A\x01@"), b"@", b"\\ud83d\\ude00"), id="escaped pair"),
        pytest.param(patched(send_frame(9, properties="A\x01@"), b"@", b"\xc3"), id="invalid utf-8"),
        pytest.param(patched(send_frame(9, properties="A\x01@"), b"@", b"\xed\xa0\x80"), id="utf-8 surrogate"),
        pytest.param(patched(send_frame(9, properties="A\x01@"), b"@", b"\\x"), id="bad escape"),
        pytest.param(patched(send_frame(9, properties="A\x01@"), b"@", b"\t"), id="raw control character"),
        pytest.param(patched(send_frame(9), b'"opaque":9', b'"opaque":9.0'), id="float opaque"),
        pytest.param(patched(send_frame(9), b'"opaque":9', b'"opaque":09'), id="leading zero"),
        pytest.param(patched(send_frame(9), b'"opaque":9', b'"opaque":2147483648'), id="opaque over int32"),
        pytest.param(patched(send_frame(9), b'"flag":0', b'"flag":0,"flag":0'), id="duplicate key"),
        pytest.param(patched(send_frame(9), b'"e":"0"', b'"e":"0","e":"1"'), id="duplicate ext key"),
        pytest.param(patched(send_frame(9), b'"e":"0"', b'"e":0'), id="number in extFields"),
        pytest.param(patched(send_frame(9), b'"b":"TopicA"', b'"b":"T\\u0041"'), id="escaped topic"),
        pytest.param(patched(send_frame(9), b'"language":"JAVA"', b'"language":0'), id="language byte"),
        pytest.param(patched(send_frame(9), b'"m":"false"}}', b'"m":"false"}} x'), id="text after the header"),
        pytest.param(send_frame(9)[:4] + b"\x01" + send_frame(9)[5:], id="rocketmq type"),
        pytest.param(send_frame(9, properties="P" * 32768), id="header over 32767 bytes"),
        pytest.param(send_frame(9, extra={"x": "1"}), id="unknown extFields key"),
        pytest.param(send_frame(9, extra={"bname": "b"}), id="long extFields key"),
        pytest.param(send_frame(9, extra={"": "1"}), id="empty extFields key"),
        pytest.param(send_frame(9, extra={"aa": "1"}), id="extFields key with a known key's first byte"),
        pytest.param(patched(send_frame(9), b'"flag":0', b'"flags":0'), id="header key with a known key's first byte"),
        pytest.param(patched(send_frame(9), b'"flag":0', b'"":0'), id="empty header key"),
        pytest.param(
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, 9, ext_fields={"b": "T"}).encode(), id="missing keys"
        ),
        pytest.param(
            RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=9, remark="r", ext_fields={}).encode(), id="remark"
        ),
        pytest.param(b"\x00\x00\x00\x02\x00\x00", id="frame too short"),
        pytest.param(b"\x00\x00\x00\x10\x00\x00\x00\x20" + b"{" * 8, id="header past the frame"),
    ],
)
def test_frames_the_lane_leaves_to_the_python_path(declined: bytes) -> None:
    """The lane stops before such a frame: alone it takes nothing, after plain sends it takes those."""
    plain = [send_frame(1), send_frame(2, queue_id="3")]
    check_parity([declined], 0)
    check_parity([*plain, declined, send_frame(3)], 2)


def test_unusual_header_text_the_lane_reads_like_the_reference() -> None:
    reordered = patched(send_frame(1), b'"code":310,"flag":0', b' \r\n{"flag":0 ,\n "code":310'[4:])
    escaped = send_frame(2, properties='A\x01"q\\ \t/\u00e9\u4e2d\U0001f600')
    check_parity([reordered, escaped, send_frame(3, properties="")], 3)


def test_property_names_that_only_begin_like_the_lanes_are_not_theirs() -> None:
    """TAGS, UNIQ_KEY, KEYS and WAIT are whole names: a longer or shorter name with their first
    bytes is another property (no tags code, no index key, WAIT unset), as the reference reads it."""
    near = "TAGSX\x01a\x02TAG\x01b\x02UNIQ_KEYS\x01u\x02KEY\x01k1\x02KEYSS\x01k2\x02WAITS\x01false\x02W\x01false"
    check_parity([send_frame(1, properties=near), send_frame(2, properties="T\x01\x02TAGS\x01t\x02WAIT\x01false")], 2)


def test_oneway_and_response_frames_are_not_the_lanes() -> None:
    oneway = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, 1, oneway=True).encode()
    check_parity([oneway], 0)


def test_a_record_over_max_message_bytes_stops_the_lane() -> None:
    frames = [send_frame(1, body=b"x" * 10), send_frame(2, body=b"x" * 500)]
    group = scan(b"".join(frames), max_message=400)
    assert group is not None and group.count == 1


def test_limit_and_refused_queues() -> None:
    frames = [send_frame(i, topic=("A", "B")[i % 2], queue_id=str(i)) for i in range(6)]
    buffer = b"".join(frames)
    assert scan(buffer, limit=4).count == 4
    group = scan(buffer)
    assert group.topics == ["A", "B"]
    assert group.topic_max_queue == [4, 5]
    assert group.topic_stats == [("A", 3, 12), ("B", 3, 12)]
    assert group.first_refused([8, 8]) == 6
    assert group.first_refused([8, 3]) == 3
    assert group.first_refused([-1, 8]) == 0


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_truncated_and_corrupted_buffers(data: st.DataObject) -> None:
    """Cut or flipped bytes: the lane takes only whole frames, and what it takes still matches
    the reference's reading of the same bytes (no read past the buffer: the cut is the end), up to
    the first topic the broker refuses (a flipped byte in a name: the Python path's check)."""
    frames = [send_frame(i, properties=f"UNIQ_KEY\x01U{i}\x02KEYS\x01a b") for i in range(4)]
    check_cut_and_flipped(data, frames)


def test_group_before_place_refuses_dispatch_and_responses() -> None:
    group = scan(send_frame(1))
    with pytest.raises(RuntimeError, match="not placed"):
        group.queue_units()
    with pytest.raises(RuntimeError, match="not placed"):
        group.index_entries()
    with pytest.raises(ValueError, match="one base"):
        group.place(0, 0, [])


def test_the_lane_stops_at_its_key_and_topic_capacity() -> None:
    """At most 1024 (topic, queue) keys and 64 topics per group: the request past either is left
    to the next scan, and a topic only it used is not reported."""
    many_keys = [send_frame(i, topic="K", queue_id=str(i)) for i in range(1024)] + [send_frame(9, topic="New")]
    group = scan(b"".join(many_keys))
    assert group is not None and (group.count, group.topics) == (1024, ["K"])
    many_topics = [send_frame(i, topic=f"T{i}") for i in range(65)]
    group = scan(b"".join(many_topics))
    assert group is not None and group.count == 64 and len(group.topics) == 64


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), st.integers(0, 1023)), min_size=1, max_size=400))
def test_keys_are_the_distinct_topic_and_queue_pairs_in_order_of_first_appearance(sends: list[tuple[str, int]]) -> None:
    """Hundreds of (topic, queue) keys, some repeated: the group's keys and counts are the distinct pairs in
    order of first appearance (the scan's key filter answers "new" at once for most; a set bit may be another
    key's, and then the keys are searched)."""
    group = scan(b"".join(send_frame(i, topic=t, queue_id=str(q)) for i, (t, q) in enumerate(sends)))
    counts: dict[tuple[str, int], int] = {}
    for key in sends:
        counts[key] = counts.get(key, 0) + 1
    assert group is not None and group.count == len(sends)
    assert group.keys == list(counts) and group.key_counts == list(counts.values())


_CODE_TEXTS = ["310", "10", "0310", "010", "-310", "310 ", " 310", "3100", "31", "0", "999999999", "4294967606"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(0, 10**12).map(str), st.sampled_from(_CODE_TEXTS)))
def test_a_frame_of_another_code_is_declined_before_its_header_is_read(code_text: str) -> None:
    """The scan's early refusal of a header opening with another request code (``other_code``): the
    lane takes a V2-shaped frame exactly when its code reads as 310 (JSON whitespace allowed, no
    leading zeros), whatever the digits, and never takes the frames after one it declined."""
    frame = patched(send_frame(1), b'"code":310', b'"code":' + code_text.encode())
    takes = re.fullmatch(r"\s*(0|[1-9][0-9]*)\s*", code_text) is not None and int(code_text) == 310
    check_parity([frame, send_frame(2)], 2 if takes else 0)
