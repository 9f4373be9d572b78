"""``SendGroup.reserve`` / ``SendGroup.append_units`` (one C call for every queue a group put
touches) against the Python path they replace, byte for byte: ConsumeQueue files, max offsets,
each queue's max physical offset, the map pool's state and the offsets handed out.

Every case runs twice on real files: once through the C call, once through
``ConsumeQueue.append_units`` of ``queue_units()`` (the reference); the queues start in the
same state (empty, continuing, with a gap before the group, replaying units already there,
unmapped by a small pool, a file about to roll).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkmq.native import queueread as native_queueread
from sparkmq.store.consume_queue import ConsumeQueue
from sparkmq.store.mapped_file import MapPool
from support.native_lane import scan, send_frame

pytest.importorskip("sparkmq.native._sendlane")

Key = tuple[str, int]


def group_of(sends: list[tuple[str, int]]) -> object:
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
    for native in (True, False):
        root = tmp / ("native" if native else "python")
        queues, pool = build(root, prefill, units_per_file, max_mapped)
        group = group_of(sends)
        # queued offsets: where each queue ends, moved by ``shift`` (a gap > 0, a replay < 0)
        queued = {key: max(queue.max_offset + shift.get(key, 0), 0) for key, queue in queues.items()}
        queued_before = dict(queued)
        if native:
            reserved = group.reserve(queued, queues)  # type: ignore[attr-defined]
            assert reserved is not None
            bases, targets, ends = reserved
        else:
            keys = group.keys  # type: ignore[attr-defined]
            bases = [queued.get(key, 0) for key in keys]
            targets = [queues[key] for key in keys]
            ends = [queue.max_physical_offset for queue in targets]
            for key, base, count in zip(keys, bases, group.key_counts, strict=True):  # type: ignore[attr-defined]
                queued[key] = base + count
        group.place(1 << 20, 1_700_000_000_000, bases)  # type: ignore[attr-defined]
        if native:
            group.append_units(bases, targets)  # type: ignore[attr-defined]
        else:
            for base, queue, (units, end) in zip(bases, targets, group.queue_units(), strict=True):  # type: ignore[attr-defined]
                queue.append_units(base, units, end)
        results.append((snapshot(root, queues), queued, bases, ends, queued_before, pool.mapped))
        for queue in queues.values():
            queue.close()
    assert results[0] == results[1]


def test_reserve_declines_a_group_with_a_new_queue_and_changes_nothing(tmp_path: Path) -> None:
    queues, _pool = build(tmp_path, {("TopicA", 0): 3}, 100, 64)
    group = group_of([("TopicA", 0), ("TopicA", 1)])
    queued = {("TopicA", 0): 3}
    assert group.reserve(queued, queues) is None  # type: ignore[attr-defined]
    assert queued == {("TopicA", 0): 3}
    assert group.reserve(queued, {**queues, ("TopicA", 1): ConsumeQueue("TopicA", 1, tmp_path, 100)}) is not None  # type: ignore[attr-defined]
    assert queued == {("TopicA", 0): 4, ("TopicA", 1): 1}


def test_the_common_case_calls_no_python_per_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Queues continuing inside mapped files are written by the C fast path (the native fields of
    the queue, its file list and segment); a queue whose file the pool unmapped goes the Python way."""
    if native_queueread is None:  # SPARKMQ_NATIVE=0: the plain bases, every queue goes the Python way
        pytest.skip("the store's objects have the plain bases")
    calls: list[tuple[str, int]] = []
    reference = ConsumeQueue.append_units

    def counted(queue: ConsumeQueue, queue_offset: int, units: bytes, end: int) -> None:
        calls.append((queue.topic, queue.queue_id))
        reference(queue, queue_offset, units, end)

    monkeypatch.setattr(ConsumeQueue, "append_units", counted)
    queues, pool = build(tmp_path, {("TopicA", q): 3 for q in range(4)}, 1000, 3)  # the first queue's file unmapped
    assert [queue.files.files[-1]._mmap is None for queue in queues.values()] == [True, False, False, False]
    calls.clear()
    group = group_of([("TopicA", q % 4) for q in range(1, 9)])
    bases, targets, _ends = group.reserve({key: 3 for key in queues}, queues)  # type: ignore[attr-defined]
    group.place(1 << 20, 1_700_000_000_000, bases)  # type: ignore[attr-defined]
    group.append_units(bases, targets)  # type: ignore[attr-defined]
    assert calls == [("TopicA", 0)]
    assert [queue.max_offset for queue in queues.values()] == [5, 5, 5, 5]
    assert pool.mapped == 3
    for queue in queues.values():
        queue.close()


def test_groups_share_one_key_object_per_queue() -> None:
    """The store's dicts keep the key object first inserted: with the lane's keys the same object
    for every group, its lookups match by identity."""
    first = group_of([("TopicA", 3), ("TopicB", 1), ("TopicA", 300)]).keys  # type: ignore[attr-defined]
    again = group_of([("TopicA", 300), ("TopicB", 1), ("TopicA", 3), ("TopicC", 2)]).keys  # type: ignore[attr-defined]
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
def test_any_group_matches_the_python_path(
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
