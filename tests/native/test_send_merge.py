"""``_sendlane.merge``: the groups of several connections' reads as one group (the broker's turn put
with ASYNC flush) against placing them one after the other, as ``MessageStore.put_lane_groups`` does
for unmerged groups: the same records byte for byte, queue offsets, ConsumeQueue units per queue,
index entries, statistics, and each connection's responses as its range of the merged group.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.broker.processors.send_lane import response_template
from sparkmq.protocol import RequestCode
from support.native_lane import STORE, cpp_fields, scan, send_frame, v1_frame

native = pytest.importorskip("sparkmq.native._sendlane")
PARTS = response_template("DefaultRegion", False)
START, NOW = 4096, 1_700_000_000_123

#: a connection's read: (topic, queue id, body, keys property or None) per send
Read = list[tuple[str, int, bytes, str | None]]
reads_strategy = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from(["TopicA", "TopicB", "T-ü"]),
            st.integers(0, 5),
            st.binary(max_size=40),
            st.sampled_from([None, "k1", "k1 k2"]),
        ),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=6,
)


def _groups(reads: list[Read], code: int = RequestCode.SEND_MESSAGE_V2) -> list[object]:
    groups, opaque = [], 1
    for read in reads:
        frames = []
        for topic, queue, body, keys in read:
            properties = "WAIT\x01true\x02UNIQ_KEY\x01ABC" + ("" if keys is None else f"\x02KEYS\x01{keys}")
            frames.append(send_frame(opaque, topic=topic, queue_id=str(queue), body=body, properties=properties))
            opaque += 1
        group = scan(b"".join(frames))
        assert group is not None and group.count == len(read)
        groups.append(group)
    return groups


def _one_after_another(groups: list[object]) -> dict[str, object]:
    """What placing ``groups`` in order makes (the unmerged put's arithmetic)."""
    queued: dict[tuple[str, int], int] = {}
    records, units, hashes, offsets, responses = [], {}, [], [], []
    position = START
    for group in groups:
        bases = [queued.get(key, 0) for key in group.keys]  # type: ignore[attr-defined]
        for key, base, count in zip(group.keys, bases, group.key_counts, strict=True):  # type: ignore[attr-defined]
            queued[key] = base + count
        records.append(group.place(position, NOW, bases))  # type: ignore[attr-defined]
        for key, (unit_bytes, end) in zip(group.keys, group.queue_units(), strict=True):  # type: ignore[attr-defined]
            before, _ = units.get(key, (b"", 0))
            units[key] = (before + unit_bytes, end)
        index_hashes, index_offsets = group.index_entries()  # type: ignore[attr-defined]
        hashes += index_hashes
        offsets += index_offsets
        responses.append(group.responses(PARTS, STORE.ip, STORE.port))  # type: ignore[attr-defined]
        position += group.record_bytes  # type: ignore[attr-defined]
    stats: dict[str, list[int]] = {}
    for group in groups:
        for topic, messages, size in group.topic_stats:  # type: ignore[attr-defined]
            row = stats.setdefault(topic, [0, 0])
            row[0] += messages
            row[1] += size
    return dict(records=b"".join(records), units=units, index=(hashes, offsets), responses=responses, stats=stats)


def _merged(groups: list[object]) -> dict[str, object]:
    merged = native.merge(groups)
    assert merged is not None
    assert merged.count == sum(group.count for group in groups)  # type: ignore[attr-defined]
    bases = [0] * len(merged.keys)
    records = merged.place(START, NOW, bases)
    units = {key: pair for key, pair in zip(merged.keys, merged.queue_units(), strict=True)}
    responses, first = [], 0
    for group in groups:
        stop = first + group.count  # type: ignore[attr-defined]
        responses.append(merged.responses(PARTS, STORE.ip, STORE.port, first, stop))
        first = stop
    stats = {topic: [messages, size] for topic, messages, size in merged.topic_stats}
    return dict(records=records, units=units, index=merged.index_entries(), responses=responses, stats=stats)


@settings(max_examples=60, deadline=None)
@given(reads=reads_strategy)
def test_a_merged_group_places_as_its_groups_one_after_another(reads: list[Read]) -> None:
    expected = _one_after_another(_groups(reads))
    got = _merged(_groups(reads))  # fresh groups: place() writes into each group's records
    assert got == expected


def test_merge_declines_what_one_group_cannot_hold() -> None:
    v2 = _groups([[("TopicA", 0, b"x", None)]])[0]
    v1 = scan(v1_frame(9, cpp_fields()))
    assert v1 is not None and v1.code == RequestCode.SEND_MESSAGE
    assert native.merge([v2, v1]) is None  # two request codes: each keeps its own statistics row
    many = _groups([[(f"T{k}", 0, b"x", None)] for k in range(65)])  # over MAX_TOPICS distinct topics
    assert native.merge(many) is None
    assert native.merge(many[:64]) is not None
    placed = _groups([[("TopicA", 0, b"x", None)]])[0]
    placed.place(START, NOW, [0])  # type: ignore[attr-defined]
    assert native.merge([placed, v2]) is None
    with pytest.raises(TypeError):
        native.merge([])
    with pytest.raises(TypeError):
        native.merge([v2, "not a group"])


def test_responses_of_a_range_are_slices_of_all() -> None:
    group = _groups([[("TopicA", q % 3, bytes([q]), None) for q in range(7)]])[0]
    group.place(START, NOW, [0] * len(group.keys))  # type: ignore[attr-defined]
    whole = group.responses(PARTS, STORE.ip, STORE.port)  # type: ignore[attr-defined]
    ranges = ((0, 2), (2, 2), (2, 7))
    parts = [group.responses(PARTS, STORE.ip, STORE.port, a, b) for a, b in ranges]  # type: ignore[attr-defined]
    assert b"".join(parts) == whole and parts[1] == b""
    for first, stop in ((1, 0), (-1, 2), (0, 8)):
        with pytest.raises(ValueError):
            group.responses(PARTS, STORE.ip, STORE.port, first, stop)  # type: ignore[attr-defined]
