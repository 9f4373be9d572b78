"""``SendGroup``'s methods take plain values and buffers only, and bad ones get a named error with
nothing changed: lists of the wrong length or holding non-ints (no ``__index__`` is called, so no
Python runs while the C reads a list), buffers too small, read-only or closed, ranges out of bounds.
The lists the group hands out are copies: changing them changes nothing in the group.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import pytest

from support.native_lane import PARTS, STORE, scan, send_frame

pytest.importorskip("sparkmq.native._sendlane")
from sparkmq.native import sendlane  # noqa: E402  (after the skip: None with SPARKMQ_NATIVE=0)

if sendlane is None:
    pytest.skip("the C send lane is not in use (SPARKMQ_NATIVE=0)", allow_module_level=True)

STAMP = 1_700_000_000_000


def group_of(*sends: tuple[str, int]) -> Any:
    frames = [send_frame(i + 1, topic=topic, queue_id=str(queue)) for i, (topic, queue) in enumerate(sends)]
    group = scan(b"".join(frames))
    assert group is not None and group.count == len(sends)
    return group


class Sneaky:
    """An int-like whose ``__index__`` empties the list it sits in (what a C reading a borrowed item
    after it would trip on); the group must refuse it without calling it."""

    def __init__(self, home: list[Any]) -> None:
        self.home = home
        self.called = False

    def __index__(self) -> int:
        self.called = True
        self.home.clear()
        return 0


def test_place_takes_one_int_per_key_and_is_not_placed_otherwise() -> None:
    group = group_of(("TopicA", 0), ("TopicA", 1))
    with pytest.raises(ValueError, match="one base queue offset per"):
        group.place(0, STAMP, [0])
    with pytest.raises(TypeError, match="must be ints"):
        group.place(0, STAMP, [0, "1"])
    bases: list[Any] = [0]
    sneaky = Sneaky(bases)
    bases.append(sneaky)
    with pytest.raises(TypeError, match="must be ints"):
        group.place(0, STAMP, bases)
    assert not sneaky.called
    with pytest.raises(OverflowError):
        group.place(0, STAMP, [0, 1 << 64])
    with pytest.raises(RuntimeError, match="not placed"):
        group.queue_units()
    assert group.place(0, STAMP, [True, 5]) == group.place(0, STAMP, [1, 5])  # an int subclass is an int


def test_first_refused_takes_one_int_per_topic() -> None:
    group = group_of(("TopicA", 0), ("TopicB", 3), ("TopicA", 2))
    assert group.first_refused([8, 8]) == 3
    assert group.first_refused([8, 3]) == 1
    with pytest.raises(ValueError, match="one queue limit per"):
        group.first_refused([8])
    with pytest.raises(ValueError, match="one queue limit per"):
        group.first_refused((8, 8))
    limits: list[Any] = [8]
    sneaky = Sneaky(limits)
    limits.append(sneaky)
    with pytest.raises(TypeError, match="must be ints"):
        group.first_refused(limits)
    assert not sneaky.called


def test_the_lists_handed_out_are_copies() -> None:
    group = group_of(("TopicA", 0), ("TopicB", 1))
    topics, keys = group.topics, group.keys
    topics.clear()
    keys.clear()
    assert group.topics == ["TopicA", "TopicB"]
    assert group.keys == [("TopicA", 0), ("TopicB", 1)]
    assert [row[0] for row in group.topic_stats] == ["TopicA", "TopicB"]


def test_index_into_refuses_small_read_only_and_closed_buffers(tmp_path: Path) -> None:
    group = group_of(("TopicA", 0))
    group.place(100, STAMP, [0])
    slots, entries = 5, 8
    size = 40 + 4 * slots + 20 * entries
    with pytest.raises(ValueError, match="do not fit"):
        group.index_into(bytearray(size), slots, entries, STAMP, None, 0, STAMP)  # full: no room for one more
    with pytest.raises(ValueError, match="do not fit"):
        group.index_into(bytearray(size), 1 << 62, 1, STAMP, None, 0, STAMP)  # slots past the buffer
    with pytest.raises(ValueError, match="do not fit"):
        group.index_into(bytearray(size), 0, 1, STAMP, None, 0, STAMP)
    with pytest.raises(ValueError, match="do not fit"):
        group.index_into(bytearray(size), slots, -1, STAMP, None, 0, STAMP)
    with pytest.raises(TypeError):
        group.index_into(bytes(size), slots, 1, STAMP, None, 0, STAMP)
    path = tmp_path / "index"
    path.write_bytes(bytes(size))
    with path.open("r+b") as file:
        mapping = mmap.mmap(file.fileno(), 0)
    mapping.close()
    with pytest.raises(TypeError):
        group.index_into(mapping, slots, 1, STAMP, None, 0, STAMP)
    assert path.read_bytes() == bytes(size)
    written = bytearray(size)
    assert group.index_into(written, slots, 1, STAMP, None, 0, STAMP) is not None


def test_responses_check_their_range_and_host() -> None:
    group = group_of(("TopicA", 0), ("TopicA", 1))
    with pytest.raises(RuntimeError, match="not placed"):
        group.responses(PARTS, STORE.ip, STORE.port)
    group.place(0, STAMP, [0, 0])
    with pytest.raises(ValueError, match="4-byte"):
        group.responses(PARTS, b"\x01\x02", STORE.port)
    for first, stop in ((-1, 1), (2, 1), (0, 3)):
        with pytest.raises(ValueError, match="first and stop"):
            group.responses(PARTS, STORE.ip, STORE.port, first, stop)
    assert group.responses(PARTS, STORE.ip, STORE.port, 1, 1) == b""
    assert group.responses(PARTS, STORE.ip, STORE.port) == (
        group.responses(PARTS, STORE.ip, STORE.port, 0, 1) + group.responses(PARTS, STORE.ip, STORE.port, 1, 2)
    )


def test_merge_takes_unplaced_groups_of_one_code() -> None:
    with pytest.raises(TypeError, match="non-empty list"):
        sendlane.merge([])
    with pytest.raises(TypeError, match="non-empty list"):
        sendlane.merge([group_of(("TopicA", 0)), object()])
    with pytest.raises(TypeError, match="non-empty list"):
        sendlane.merge((group_of(("TopicA", 0)),))
    placed = group_of(("TopicA", 0))
    placed.place(0, STAMP, [0])
    assert sendlane.merge([group_of(("TopicA", 1)), placed]) is None
    groups = [group_of(("TopicA", 0)), group_of(("TopicB", 0), ("TopicA", 0))]
    merged = sendlane.merge(groups)
    groups.clear()  # the merge holds nothing of the list
    assert merged.count == 3 and merged.keys == [("TopicA", 0), ("TopicB", 0)]
