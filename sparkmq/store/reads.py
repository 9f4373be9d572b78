"""Reading a queue: ConsumeQueue units → tag filter → CommitLog runs, with RocketMQ's statuses."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from sparkmq.store.commitlog import CommitLog
from sparkmq.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from sparkmq.store.status import GetMessageStatus, GetResult

MAX_FILTER_SCAN_UNITS = 16_000  # maxFilterMessageCount: units scanned per read when filtering


def read_queue(commitlog: CommitLog, queue: ConsumeQueue | None, offset: int, max_count: int, max_bytes: int,
               tags_codes: Collection[int] | None) -> GetResult:
    """``DefaultMessageStore.getMessage`` for one queue, moving records as whole runs."""
    if queue is None:
        return GetResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    low, high = queue.min_offset, queue.max_offset
    if high == 0:
        return GetResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, low, high)
    if offset < low:
        return GetResult(GetMessageStatus.OFFSET_TOO_SMALL, low, low, high)
    if offset == high:
        return GetResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, low, high)
    if offset > high:
        return GetResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, low if low == 0 else high, low, high)
    window = max_count if tags_codes is None else max(max_count, MAX_FILTER_SCAN_UNITS)
    units = queue.read_units(offset, min(window, high - offset))
    physical = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    wanted = sizes != BLANK_UNIT_SIZE
    cl_min = commitlog.min_offset
    removed = wanted & (physical < cl_min)
    wanted &= ~removed
    if tags_codes is not None:
        wanted &= np.isin(units["tags_code"].astype(np.int64), np.fromiter(tags_codes, dtype=np.int64))
    matched = np.flatnonzero(wanted)
    rows = matched[:max_count]
    if len(rows):
        within = np.cumsum(sizes[rows]) <= max_bytes
        within[0] = True  # one message always goes, however large
        rows = rows[: len(rows) if within.all() else int(np.argmin(within))]
    # Stopped by a limit: resume right after the last record taken; else every unit was seen.
    scanned = int(rows[-1]) + 1 if len(rows) < len(matched) else len(units)
    next_offset = offset + scanned
    if len(rows) == 0:
        status = GetMessageStatus.MESSAGE_WAS_REMOVING if removed.any() else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetResult(status, next_offset, low, high)
    buffers = commitlog.read_runs(physical[rows], sizes[rows])
    if buffers is None:
        return GetResult(GetMessageStatus.MESSAGE_WAS_REMOVING, next_offset, low, high)
    return GetResult(GetMessageStatus.FOUND, next_offset, low, high, buffers, offset + rows, physical[rows], sizes[rows])
