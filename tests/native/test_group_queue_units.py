"""A lane group's ConsumeQueue units written by the store (``put_steps.reserve_keys`` and
``append_lane_units``: the C only encodes them, ``queue_units()``) against the usual dispatch
(``ConsumeQueue.append`` of each queue's record columns), byte for byte on real files: ConsumeQueue
files, max offsets, each queue's max physical offset, the map pool's state and the offsets
handed out.

The queues start in the same state (empty, continuing, with a gap before the group, replaying
units already there, unmapped by a small pool, a file about to roll).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkmq.store.consume_queue import ConsumeQueue
from sparkmq.store.mapped_file import MapPool
from sparkmq.store.put_steps import append_lane_units, reserve_keys
from support.native_lane import scan, send_frame

pytest.importorskip("sparkmq.native._sendlane")

Key = tuple[str, int]
START = 1 << 20


def group_of(sends: list[tuple[str, int]]) -> Any:
    frames = [send_frame(i + 1, topic=topic, queue_id=str(queue)) for i, (topic, queue) in enumerate(sends)]
    group = scan(b"".join(frames))
    assert group is not None and group.count == len(sends)
    return group


def snapshot(root: Path, queues: dict[Key, ConsumeQueue]) -> dict[object, object]:
    """Everything the two paths must agree on."""
    files = {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}
    state = {
        key: (
            queue.max_offset,
            queue.min_offset,
            queue.max_physical_offset,
            [(f.start_offset, f.write_position, f.flushed_position, f._mmap is not None) for f in queue.files.files],
        )
        for key, queue in queues.items()
    }
    return {"files": files, "state": state}


def build(
    root: Path, prefill: dict[Key, int], units_per_file: int, max_mapped: int
) -> tuple[dict[Key, ConsumeQueue], MapPool]:
    pool = MapPool(max_mapped)
    queues = {}
    for (topic, queue_id), count in prefill.items():
        queue = ConsumeQueue(topic, queue_id, root, units_per_file, pool)
        if count:
            queue.append(0, [64 * i for i in range(count)], [64] * count, [0] * count)
        queues[(topic, queue_id)] = queue
    return queues, pool


def run_case(
    tmp: Path,
    sends: list[tuple[str, int]],
    prefill: dict[Key, int],
    shift: dict[Key, int],
    units_per_file: int,
    max_mapped: int,
) -> None:
    results = []
    for lane in (True, False):
        root = tmp / ("lane" if lane else "dispatch")
        queues, pool = build(root, prefill, units_per_file, max_mapped)
        group = group_of(sends)
        # queued offsets: where each queue ends, moved by ``shift`` (a gap > 0, a replay < 0)
        queued = {key: max(queue.max_offset + shift.get(key, 0), 0) for key, queue in queues.items()}
        store: Any = SimpleNamespace(_next_queue_offset=queued, _queues=queues)
        bases, targets, ends = reserve_keys(store, group)
        records = group.place(START, 1_700_000_000_000, bases)
        if lane:
            append_lane_units(group, bases, targets)
        else:  # each key's records through ConsumeQueue.append, as the usual group dispatch writes them
            columns: dict[Key, tuple[list[int], list[int]]] = {key: ([], []) for key in group.keys}
            at = START
            for key in sends:
                size = int.from_bytes(records[at - START : at - START + 4], "big")
                columns[key][0].append(at)
                columns[key][1].append(size)
                at += size
            for key, base in zip(group.keys, bases, strict=True):
                offsets, sizes = columns[key]
                queues[key].append(base, offsets, sizes, [0] * len(sizes))
        results.append((snapshot(root, queues), queued, bases, ends, pool.mapped))
        for queue in queues.values():
            queue.close()
    assert results[0] == results[1]


def test_groups_share_one_key_object_per_queue() -> None:
    """The store's dicts keep the key object first inserted: with the lane's keys the same object
    for every group, its lookups match by identity."""
    first = group_of([("TopicA", 3), ("TopicB", 1), ("TopicA", 300)]).keys
    again = group_of([("TopicA", 300), ("TopicB", 1), ("TopicA", 3), ("TopicC", 2)]).keys
    assert first == [("TopicA", 3), ("TopicB", 1), ("TopicA", 300)]
    assert again == [("TopicA", 300), ("TopicB", 1), ("TopicA", 3), ("TopicC", 2)]
    assert [again[2], again[1], again[0]] == first
    assert all(a is b for a, b in zip([again[2], again[1], again[0]], first, strict=True))


def test_continuing_queues_in_their_files(tmp_path: Path) -> None:
    sends = [("TopicA", i % 7) for i in range(50)] + [("TopicB", 3)] * 4
    prefill = {("TopicA", q): 5 + q for q in range(7)} | {("TopicB", 3): 1}
    run_case(tmp_path, sends, prefill, {}, 1000, 64)


def test_empty_queues_gaps_replays_rolls_and_unmapped_files(tmp_path: Path) -> None:
    sends = [("TopicA", i % 6) for i in range(40)]
    prefill = {
        ("TopicA", 0): 0,
        ("TopicA", 1): 9,
        ("TopicA", 2): 3,
        ("TopicA", 3): 15,
        ("TopicA", 4): 2,
        ("TopicA", 5): 7,
    }
    shift = {("TopicA", 2): 4, ("TopicA", 4): -2, ("TopicA", 5): -30}
    run_case(tmp_path, sends, prefill, shift, 16, 2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    queue_ids=st.lists(st.integers(0, 5), min_size=1, max_size=60),
    prefill=st.lists(st.integers(0, 40), min_size=6, max_size=6),
    shift=st.lists(st.integers(-10, 10), min_size=6, max_size=6),
    units_per_file=st.sampled_from([4, 16, 1000]),
    max_mapped=st.sampled_from([1, 3, 100]),
)
def test_any_group_matches_the_usual_dispatch(
    tmp_path_factory: pytest.TempPathFactory,
    queue_ids: list[int],
    prefill: list[int],
    shift: list[int],
    units_per_file: int,
    max_mapped: int,
) -> None:
    keys = [("TopicH", q) for q in range(6)]
    run_case(
        tmp_path_factory.mktemp("units"),
        [("TopicH", q) for q in queue_ids],
        dict(zip(keys, prefill, strict=True)),
        dict(zip(keys, shift, strict=True)),
        units_per_file,
        max_mapped,
    )
