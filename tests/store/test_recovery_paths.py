"""The bounded start-up paths agree with plain full scans.

``ConsumeQueue._first_unit_ending_after`` and ``correct_min_offset`` binary-search single
units; the reference implementations below read every unit, as the store did before. Random
queues (gaps of blank units, a front that starts mid-file, several files) are compared on
random bounds. Start-up then is checked to replay only the tail after a clean exit and after
a kill -9 of a writer process, and to leave exactly what a full check expects.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sparkmq.store import MessageStore
from sparkmq.store.consume_queue import BLANK_UNIT_SIZE, UNIT_BYTES, ConsumeQueue
from support import store_checks as sc

_HERE = Path(__file__).parent


def first_unit_ending_after_reference(queue: ConsumeQueue, physical_end: int) -> int:
    lo, hi = queue.min_offset, queue.max_offset
    units = queue.read_units(lo, hi - lo)
    ends = units["offset"].astype(np.int64) + units["size"].astype(np.int64)
    dirty = np.flatnonzero((units["size"] != BLANK_UNIT_SIZE) & (ends > physical_end))
    return lo + int(dirty[0]) if len(dirty) else hi


def corrected_min_offset_reference(queue: ConsumeQueue, commitlog_min: int) -> int:
    lo, hi = queue.min_offset, queue.max_offset
    if hi <= lo:
        return queue.min_offset
    units = queue.read_units(lo, hi - lo)
    live = np.flatnonzero((units["offset"] >= commitlog_min) & (units["size"] != BLANK_UNIT_SIZE))
    first = lo + int(live[0]) if len(live) else hi
    return max(queue.min_logic_offset, first * UNIT_BYTES) // UNIT_BYTES


def random_queue(root: Path, rng: random.Random) -> tuple[ConsumeQueue, int]:
    """A queue of random runs (some after a gap of blank units); returns it and its physical end."""
    queue = ConsumeQueue("T", 0, root, units_per_file=rng.choice([4, 16, 64]))
    queue_offset = rng.choice([0, 0, rng.randrange(1, 200)])  # sometimes begins mid-file
    physical = rng.randrange(0, 1000)
    for _ in range(rng.randrange(0, 25)):
        count = rng.randrange(1, 30)
        sizes = [rng.randrange(60, 500) for _ in range(count)]
        offsets = []
        for size in sizes:
            physical += rng.choice([0, 0, 0, rng.randrange(1, 3000)])  # other queues' records between
            offsets.append(physical)
            physical += size
        queue.append(queue_offset, offsets, sizes, [rng.randrange(-5, 5) for _ in sizes])
        queue_offset += count + rng.choice([0, 0, 0, rng.randrange(1, 40)])  # a gap: blank units
    return queue, physical


@pytest.mark.parametrize("seed", range(40))
def test_binary_searches_agree_with_full_scans(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    queue, end = random_queue(tmp_path, rng)
    try:
        bounds = [0, end, end + 1] + [rng.randrange(0, end + 2) for _ in range(30)]
        for bound in bounds:
            assert queue._first_unit_ending_after(bound) == first_unit_ending_after_reference(queue, bound), bound
            expected = corrected_min_offset_reference(queue, bound)
            saved = queue.min_logic_offset
            queue.correct_min_offset(bound)
            assert queue.min_offset == expected, bound
            queue.min_logic_offset = saved
        cut = rng.randrange(0, end + 1)
        dirty, before = first_unit_ending_after_reference(queue, cut), queue.max_offset
        queue.truncate_after_physical(cut)
        assert queue.max_offset == min(dirty, before)
        assert queue.max_physical_offset <= cut
    finally:
        queue.close()


def test_a_full_file_always_has_a_next_one(tmp_path: Path) -> None:
    """So a full last file at start-up means lost files (recovery.lost_queue_start)."""
    queue = ConsumeQueue("T", 0, tmp_path, units_per_file=8)
    try:
        queue.append(0, list(range(0, 800, 100)), [100] * 8, [0] * 8)
        assert [f.start_offset // UNIT_BYTES for f in queue.files.files] == [0, 8]
        assert queue.max_offset == 8 and not queue.files.files[-1].is_full
    finally:
        queue.close()


def test_clean_start_replays_only_the_tail(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = MessageStore(sc.crash_config(root))
    store.start()
    for seq in range(60):
        store.put_messages(sc.expected_batch(11, seq).batch())
    end = store.commitlog.max_offset
    store.close()
    store = MessageStore(sc.crash_config(root))
    report = store.start()
    try:
        assert report.anchored and report.last_exit_ok
        newest = max(store.consume_queue(sc.TOPIC, q).last_unit()["offset"] for q in range(sc.QUEUES))
        assert report.dispatched_from == newest and report.process_offset == end
        sc.check_consistent(store)
    finally:
        store.close()


def test_start_after_kill_9_replays_from_the_newest_intact_record(tmp_path: Path) -> None:
    """A writer process is SIGKILLed mid-run; the next start anchors, and everything it
    acknowledged is there, with ConsumeQueues that end exactly at the CommitLog's end."""
    root = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_HERE.parent.parent), str(_HERE.parent)]))
    child = subprocess.Popen(
        [sys.executable, str(_HERE / "crash_writer.py"), str(root), "5", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    acked: list[tuple[int, int, int]] = []
    for line in child.stdout:
        if line.startswith("ack"):
            _, queue_id, first, count, _seq = line.split()
            acked.append((int(queue_id), int(first), int(count)))
            if len(acked) == 40:
                child.send_signal(signal.SIGKILL)
                break
    child.wait()
    child.stdout.close()
    store = MessageStore(sc.crash_config(root))
    report = store.start()
    try:
        assert not report.last_exit_ok and report.anchored
        queues = sc.check_consistent(store)
        for queue_id, first, count in acked:
            assert len(queues[(sc.TOPIC, queue_id)]) >= first + count
        ends = [
            int(u["offset"]) + int(u["size"])
            for q in range(sc.QUEUES)
            if (u := store.consume_queue(sc.TOPIC, q).last_unit()) is not None
        ]
        assert report.process_offset == store.commitlog.max_offset
        # The queues end at the last record; only an END_OF_FILE filler may follow it, when the
        # kill came right after a segment was closed (then the end is the next segment's start).
        assert max(ends) == report.process_offset or (
            report.process_offset % store.commitlog.file_bytes == 0
            and max(ends) < report.process_offset
            and not list(store.commitlog.scan(max(ends), check_crc=True))
        )
    finally:
        store.close()
