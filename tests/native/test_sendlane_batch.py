"""The native send lane's SEND_BATCH_MESSAGE (the Java client's batches) against the Python reference.

Each item of a batch the lane takes is one CommitLog record, the batch's header properties appended to
the item's own (``SendProcessor._batch_of``); its records, ConsumeQueue units, index keys, statistics and
its one response (the records' ids comma-joined, the first queue offset) equal what the Python decoder and
encoders make of the same frame (support/native_lane.py). A batch the Python path treats otherwise
(compressed, empty, malformed, a delay or transaction, properties or a record over the limits) stops the
lane before it, with nothing of it in the group.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sparkmq.broker.processors.send_lane import response_template
from sparkmq.message.batch import encode_batch_items
from support.native_lane import STORE, batch_frame, check_cut_and_flipped, check_parity, scan, send_frame

native = pytest.importorskip("sparkmq.native._sendlane")

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
_ITEM_PROPS = st.one_of(
    st.just(b""),
    _TEXT.map(lambda text: text.encode()),  # any text, separators included
    st.builds(
        lambda tags, keys, uniq, end: f"TAGS\x01{tags}\x02KEYS\x01{keys}\x02UNIQ_KEY\x01{uniq}{end}".encode(),
        _TEXT,
        st.lists(_TEXT.filter(lambda k: "\x02" not in k), max_size=3).map(" ".join),
        _TEXT,
        st.sampled_from(["", "\x02"]),
    ),
)
_ITEMS = st.lists(
    st.tuples(st.binary(max_size=200), _ITEM_PROPS, st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=12
)


@st.composite
def batches(draw: st.DrawFn) -> list[bytes]:
    frames = []
    for opaque in range(draw(st.integers(1, 6))):
        items = draw(_ITEMS)
        header = draw(st.one_of(st.none(), st.just(""), st.just("WAIT\x01true\x02"), _TEXT))
        texts = [props.decode() for _body, props, _flag in items] + [header or ""]
        assume(not any("DELAY\x01" in text or "TRAN_MSG\x01" in text for text in texts))
        frames.append(
            batch_frame(
                opaque,
                items,
                properties=header,
                topic=draw(st.sampled_from(["TopicA", "TopicB", "T-u|x_9"])),
                queue_id=str(draw(st.integers(0, 7))),
                sys_flag=str(draw(st.sampled_from([0, 2, 0x10, 0x20, 0x32]))),
                born=str(draw(st.integers(0, 2**63 - 1))),
                reconsume=draw(st.one_of(st.none(), st.integers(0, 99).map(str))),
                extra={"m": draw(st.sampled_from(["true", "false"]))},  # code 320 is a batch whatever it says
            )
        )
    return frames


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_batches_match_the_python_encoders(frames: list[bytes]) -> None:
    check_parity(frames, len(frames))


def _items(n: int = 3, props: bytes = b"UNIQ_KEY\x01U\x02TAGS\x01t") -> list[tuple[bytes, bytes, int]]:
    return [(b"body%d" % i, props + b"%d" % i, i) for i in range(n)]


def _body_patched(frame: bytes, new_body: bytes) -> bytes:
    header_length = int.from_bytes(frame[4:8]) & 0xFFFFFF
    header = frame[8 : 8 + header_length]
    return (4 + header_length + len(new_body)).to_bytes(4) + frame[4:8] + header + new_body


_GOOD = encode_batch_items([b"a", b"b"], [b"A\x01x", b"B\x01y"], [0, 0])


@pytest.mark.parametrize(
    "declined",
    [
        pytest.param(batch_frame(9, _items(), sys_flag="1"), id="compressed"),
        pytest.param(batch_frame(9, []), id="no item"),
        pytest.param(batch_frame(9, _items(), properties="DELAY\x013"), id="delay level in the header"),
        pytest.param(batch_frame(9, [*_items(2), (b"x", b"DELAY\x012", 0)]), id="delay level in an item"),
        pytest.param(batch_frame(9, [*_items(2), (b"x", b"TRAN_MSG\x01true", 0)]), id="transaction item"),
        pytest.param(batch_frame(9, _items(), sys_flag="4"), id="prepared sysFlag"),
        pytest.param(batch_frame(9, [*_items(2), (b"x", b"A\x01\xc3", 0)]), id="item properties not utf-8"),
        pytest.param(batch_frame(9, [*_items(2), (b"x", b"A\x01\xed\xa0\x80", 0)]), id="item utf-8 surrogate"),
        pytest.param(batch_frame(9, [(b"x", b"P" * 32760, 0)]), id="joined properties over 32767 bytes"),
        pytest.param(batch_frame(9, _items(), topic="%RETRY%G"), id="retry topic"),
        pytest.param(batch_frame(9, _items(), queue_id="-1"), id="random queue"),
        pytest.param(batch_frame(9, _items(), extra={"m": "TRUE"}), id="odd batch flag"),
        pytest.param(_body_patched(batch_frame(9, _items()), _GOOD[:-1]), id="item cut"),
        pytest.param(_body_patched(batch_frame(9, _items()), _GOOD + b"\x00" * 21), id="tail shorter than a head"),
        pytest.param(_body_patched(batch_frame(9, _items()), b"\x00\x00\x00\x15" + _GOOD[4:]), id="size under 22"),
        pytest.param(_body_patched(batch_frame(9, _items()), _GOOD[:16] + b"\xff" * 4 + _GOOD[20:]), id="body -1"),
        pytest.param(
            _body_patched(batch_frame(9, _items()), _GOOD[:21] + b"\x80" + _GOOD[22:]), id="negative properties length"
        ),
        pytest.param(
            _body_patched(batch_frame(9, _items()), _GOOD[:21] + b"\x04" + _GOOD[22:]), id="size past its parts"
        ),
    ],
)
def test_batches_the_lane_leaves_to_the_python_path(declined: bytes) -> None:
    """Alone it takes nothing; after batches it takes those, and nothing of the declined one (its items
    before the one it stops at, its topic) stays in the group."""
    plain = [batch_frame(1, _items(4)), batch_frame(2, _items(2), queue_id="3")]
    check_parity([declined], 0)
    check_parity([*plain, declined, batch_frame(3, _items())], 2)


def test_a_batch_stopped_at_a_later_item_forgets_its_new_topic_and_queue() -> None:
    frames = [batch_frame(1, _items(3)), batch_frame(2, [*_items(5), (b"x", b"DELAY\x011", 0)], topic="Fresh")]
    group = scan(b"".join(frames))
    assert group is not None and (group.count, group.rows) == (1, 3)
    assert group.topics == ["TopicA"] and group.keys == [("TopicA", 0)] and group.key_counts == [3]
    check_parity(frames, 1)


def test_a_record_over_max_message_bytes_stops_the_lane_before_its_batch() -> None:
    frames = [batch_frame(1, _items(3)), batch_frame(2, [(b"x", b"", 0), (b"x" * 500, b"", 0)])]
    group = scan(b"".join(frames), max_message=400)
    assert group is not None and (group.count, group.rows) == (1, 3)


def test_batches_and_single_sends_are_separate_groups() -> None:
    """One request code per group (its statistics'): a single send after batches ends their group."""
    frames = [batch_frame(1, _items()), send_frame(2), batch_frame(3, _items())]
    group = scan(b"".join(frames))
    assert group is not None and group.count == 1 and group.code == 320
    check_parity(frames[:1], 1)


def test_first_refused_and_answers_count_requests_not_records() -> None:
    frames = [batch_frame(i, _items(i + 1), topic=("A", "B")[i % 2], queue_id=str(i)) for i in range(4)]
    group = scan(b"".join(frames))
    assert group is not None and (group.count, group.rows) == (4, 10)
    assert group.first_refused([8, 8]) == 4 and group.first_refused([8, 3]) == 3 and group.first_refused([-1, 8]) == 0
    group.place(4096, 1, [0] * len(group.keys))
    answers = group.answers()
    assert [(opaque, len(physical), queue) for opaque, physical, queue, _offset, _waits in answers] == [
        (0, 1, 0),
        (1, 2, 1),
        (2, 3, 2),
        (3, 4, 3),
    ]
    assert answers[0][1] == [4096] and all(waits for *_rest, waits in answers)
    parts = response_template("R", True)
    assert parts is not None
    whole = group.responses(parts, STORE.ip, STORE.port)
    pieces = [group.responses(parts, STORE.ip, STORE.port, a, b) for a, b in ((0, 1), (1, 3), (3, 4))]
    assert b"".join(pieces) == whole


def test_merged_batches_answer_as_their_groups() -> None:
    """A turn's groups with batches merged (ASYNC flush): each connection's range answers as its own group."""
    reads = [[batch_frame(1, _items(3)), batch_frame(2, _items(2), topic="B")], [batch_frame(3, _items(4))]]
    parts = response_template("R", True)
    assert parts is not None
    alone, position, offsets = [], 4096, {}
    for read in reads:
        group = scan(b"".join(read))
        bases = [offsets.get(key, 0) for key in group.keys]
        for key, base, count in zip(group.keys, bases, group.key_counts, strict=True):
            offsets[key] = base + count
        records = group.place(position, 1, bases)
        alone.append((records, group.responses(parts, STORE.ip, STORE.port)))
        position += len(records)
    groups = [scan(b"".join(read)) for read in reads]
    merged = native.merge(groups)
    assert merged is not None and (merged.count, merged.rows) == (3, 9)
    records = merged.place(4096, 1, [0] * len(merged.keys))
    assert records == b"".join(r for r, _ in alone)
    assert merged.responses(parts, STORE.ip, STORE.port, 0, 2) == alone[0][1]
    assert merged.responses(parts, STORE.ip, STORE.port, 2, 3) == alone[1][1]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_truncated_and_corrupted_batches(data: st.DataObject) -> None:
    frames = [batch_frame(i, _items(i + 1, b"UNIQ_KEY\x01U\x02KEYS\x01a b\x02TAGS\x01t")) for i in range(3)]
    check_cut_and_flipped(data, frames)
