"""The plain (small batch) and bulk (numpy) put paths write byte-identical store files.

``SMALL_BATCH_MAX`` picks the path (encode, CommitLog append, dispatch columns; the
ConsumeQueue and IndexFile follow with lists or arrays); forcing it to 0 runs everything
through numpy, forcing it huge runs everything through the plain code. The same puts at the same
store timestamps must leave the same bytes, and so must the rebuild of ConsumeQueues and
index from the CommitLog.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from sparkmq.message import MessageBatch, encode_properties
from sparkmq.store import MessageStore, disk
from sparkmq.store.index_file import IndexFile
from sparkmq.store.mapped_file import MappedFile
from sparkmq.store.mapped_file_queue import MappedFileQueue
from support.store_data import tiny_config

PATHS = {"plain": 10**9, "bulk": 0, "auto": None}


def force_path(monkeypatch: pytest.MonkeyPatch, limit: int | None) -> list[str]:
    """Set SMALL_BATCH_MAX in every sparkmq module that reads it; return their names."""
    patched = [
        name
        for name, module in sys.modules.items()
        if name.startswith("sparkmq.") and hasattr(module, "SMALL_BATCH_MAX")
    ]
    if limit is not None:
        for name in patched:
            monkeypatch.setattr(sys.modules[name], "SMALL_BATCH_MAX", limit)
    return patched


def test_every_layer_with_a_small_path_is_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    patched = set(force_path(monkeypatch, None))
    # ConsumeQueue and index follow the request: lists from the plain path, arrays from the bulk one.
    assert {"sparkmq.message.record", "sparkmq.store.commitlog", "sparkmq.store.dispatch"} <= patched


def _properties(rng: random.Random, n: int) -> list[bytes]:
    props = []
    for i in range(n):
        shape = rng.randrange(6)
        if shape == 0:
            props.append(b"")
        elif shape == 1:  # a repeated key (batch-level properties appended), no UNIQ_KEY
            props.append(b"TAGS\x01A\x02KEYS\x01k" + str(i).encode() + b"\x02TAGS\x01B")
        elif shape == 2:
            props.append(
                encode_properties({"KEYS": f"a{i} b{i}  c", "TAGS": "Tägé", "UNIQ_KEY": f"U{rng.getrandbits(64):X}"})
            )
        else:
            props.append(
                encode_properties(
                    {
                        "TAGS": rng.choice(["TagA", "TagB"]),
                        "KEYS": f"order-{rng.randrange(50)}",
                        "UNIQ_KEY": f"{rng.getrandbits(128):032X}",
                        "WAIT": "true",
                    }
                )
            )
    return props


def _workload(seed: int = 7) -> list[MessageBatch]:
    rng = random.Random(seed)
    batches = []
    for _ in range(60):
        n = rng.choice([1, 1, 2, 3, 7, 8, 9, 12, 20])
        bodies = [rng.randbytes(rng.randrange(0, 400)) for _ in range(n)]
        batches.append(
            MessageBatch(
                rng.choice(["TopicA", "TopicB"]),
                rng.randrange(3),
                bodies,
                _properties(rng, n),
                born_timestamp=1_700_000_000_000,
            )
        )
    return batches


def _files(root: Path, part: str) -> list[tuple[str, bytes]]:
    """(relative name, bytes) of the files under ``part``; index files by position (names are times)."""
    found = sorted(p for p in (root / part).rglob("*") if p.is_file())
    if part == "index":
        return [(str(i), p.read_bytes()) for i, p in enumerate(found)]
    return [(str(p.relative_to(root)), p.read_bytes()) for p in found]


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """time.time() advancing 0.3 ms per call on this thread; calling the fixture restarts it."""
    real = time.time
    state = {"now": 0.0}
    main = threading.get_ident()

    def fake() -> float:
        if threading.get_ident() != main:
            return real()
        state["now"] += 0.0003
        return state["now"]

    def restart() -> None:
        state["now"] = 1_700_000_000.0

    restart()
    monkeypatch.setattr(time, "time", fake)
    return restart


def _run_store(root: Path, batches: list[MessageBatch]) -> list[tuple[int, int]]:
    store = MessageStore(tiny_config(root))
    store.start()
    try:
        results = [store.put_messages(b) for b in batches]
        assert all(r.ok for r in results)
        assert all(isinstance(r.physical_offsets, np.ndarray) and r.physical_offsets.dtype == np.int64 for r in results)
        return [(int(p), int(s)) for r in results for p, s in zip(r.physical_offsets, r.sizes, strict=True)]
    finally:
        store.close()


def _rebuild(root: Path) -> None:
    """Drop ConsumeQueues and index, restart: the catch-up dispatch rebuilds them from the CommitLog."""
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    store = MessageStore(tiny_config(root))
    store.start()
    store.close()


def test_plain_bulk_and_auto_paths_write_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixed_clock: Callable[[], None]
) -> None:
    written: dict[str, dict[str, object]] = {}
    for name, limit in PATHS.items():
        with monkeypatch.context() as patch:
            force_path(patch, limit)
            fixed_clock()
            root = tmp_path / name
            offsets = _run_store(root, _workload())
            parts = {part: _files(root, part) for part in ("commitlog", "consumequeue", "index")}
            _rebuild(root)
            rebuilt = {part: _files(root, part) for part in ("consumequeue", "index")}
        written[name] = {"offsets": offsets, **parts, "rebuilt": rebuilt}
    plain = written["plain"]
    assert len(plain["commitlog"]) > 3 and len(plain["index"]) > 3  # segments and index files rolled
    assert plain["rebuilt"] == {"consumequeue": plain["consumequeue"], "index": plain["index"]}
    for name in ("bulk", "auto"):
        for part in ("offsets", "commitlog", "consumequeue", "index", "rebuilt"):
            assert written[name][part] == plain[part], (name, part)


@pytest.mark.parametrize("seed", range(5))
def test_index_entries_plain_and_bulk_with_stale_slot_heads(tmp_path: Path, seed: int) -> None:
    """Slot heads naming entries past the count (a crash before the header was written) are not trusted."""
    rng = random.Random(seed)
    files = [IndexFile(tmp_path / f"{name}{seed}", 16, 64) for name in ("plain", "bulk")]
    for _ in range(6):
        count = files[0].index_count
        for slot in rng.sample(range(16), 6):  # the same stale or valid heads in both files
            value = rng.choice([-1, 0, count - 1, count, count + 1, count + 20])
            for index in files:
                index._slots[slot] = value  # noqa: SLF001 - seeding raw state
        n = rng.randrange(1, 9)
        hashes = [rng.randrange(0, 2**31) for _ in range(n)]
        offsets = sorted(rng.randrange(0, 10**6) for _ in range(n))
        times = [1_700_000_000_000 + rng.randrange(0, 10**7) for _ in range(n)]
        files[0].put_plain(hashes, offsets, times)
        files[1].put_bulk(np.array(hashes), np.array(offsets), np.array(times))
        for index in files:
            index.index_count += n
    try:
        assert files[0].hash_slot_count == files[1].hash_slot_count
        assert files[0]._mmap[:] == files[1]._mmap[:]  # noqa: SLF001
    finally:
        for index in files:
            index.close()


def test_commitlog_segments_sync_by_fdatasync_and_let_go_of_full_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("fdatasync is used on Linux only")
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(disk, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    mapped = MappedFile(tmp_path / f"{0:020d}", 4096, sync_by_fd=True)
    try:
        mapped.append(b"x" * 100)
        assert mapped.flush() == 100 and len(synced) == 1
        assert mapped.flush() == 100 and len(synced) == 1  # nothing new, no sync
        mapped.append(b"y" * 100)
        mapped.mark_full()
        assert mapped.flush() == 4096 and len(synced) == 2
        assert mapped._fd is None  # noqa: SLF001 - a full, flushed segment keeps no descriptor
        assert (tmp_path / f"{0:020d}").read_bytes()[:200] == b"x" * 100 + b"y" * 100
    finally:
        mapped.close()


def test_queue_flush_reports_what_it_flushed_while_an_append_rolls_the_segment(tmp_path: Path) -> None:
    """An append may fill the last segment and open the next during a flush: the flush must not
    report the new segment's start as flushed."""
    queue = MappedFileQueue(tmp_path, 4096, sync_by_fd=True)
    first = queue.last_file()
    first.append(b"a" * 1000)
    real_flush = first.flush

    def flush_then_append() -> int:
        del first.flush  # once
        flushed = real_flush()
        first.append(b"b" * 1000)  # another thread's append lands after the sync...
        first.mark_full()
        queue.last_file().append(b"c" * 10)  # ...and rolls to a new segment
        return flushed

    first.flush = flush_then_append
    try:
        assert queue.flush() == 1000
        assert queue.flush() == 4096 + 10
    finally:
        queue.close()
