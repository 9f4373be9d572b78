"""IndexService: the IndexFiles of a store, newest last; puts keys and answers key queries."""

from __future__ import annotations

import bisect
import logging
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from sparkmq.message.record import IntColumn
from sparkmq.store.index_file import IndexDamage, IndexFile, index_key_hashes

if TYPE_CHECKING:
    from sparkmq.store.lane import EncodedGroup

logger = logging.getLogger(__name__)


def index_file_name(now: float) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as RocketMQ names index files."""
    stamp = datetime.fromtimestamp(now)
    return stamp.strftime("%Y%m%d%H%M%S") + f"{stamp.microsecond // 1000:03d}"


class IndexService:
    """Keeps ``IndexFile`` objects in ``directory`` and routes puts to the newest one."""

    def __init__(self, directory: Path, slots: int, entries: int) -> None:
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.files: list[IndexFile] = []
        self.damaged: list[IndexDamage] = []  # files ``load`` found damaged: the store rebuilds them

    def load(self) -> None:
        """Open the existing files, oldest first; repair the newest one's slot heads after a kill.

        Only the newest file can hold a put that a kill cut short (a put that rolls to a new
        file finished the previous one first).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(p for p in self.directory.iterdir() if p.name.isdigit()):
            self.files.append(IndexFile(path, self.slots, self.entries))
            fault = self.files[-1].header_fault()
            if fault is not None:
                self.damaged.append(IndexDamage(self.files[-1], 0, fault))
        if self.files and self.files[-1].header_fault() is None and (repaired := self.files[-1].repair_heads()):
            logger.warning(
                "index file %s: %d slot heads named entries a killed put never counted; repaired",
                self.files[-1].path.name,
                repaired,
            )

    @property
    def end_phy_offset(self) -> int:
        return self.files[-1].end_phy_offset if self.files else 0

    def _writable(self, new_file: bool = False) -> IndexFile:
        if new_file or not self.files or self.files[-1].is_full:
            previous = self.files[-1] if self.files else None
            now = time.time()
            path = self.directory / index_file_name(now)
            while path.exists() or (previous is not None and path.name <= previous.path.name):
                now += 0.001
                path = self.directory / index_file_name(now)
            begin_ts = previous.end_timestamp if previous else 0
            begin_phy = previous.end_phy_offset if previous else 0
            if previous is not None:
                previous.flush()
            self.files.append(IndexFile(path, self.slots, self.entries, begin_ts, begin_phy))
        return self.files[-1]

    def put(self, hashes: IntColumn, phy_offsets: IntColumn, store_timestamps: IntColumn) -> int | None:
        """Index key ``hashes`` (see ``index_file``); skip what the newest file already covers.

        Returns the endTimestamp of a file that filled up (for the checkpoint), else None.
        """
        # Entries go in log order and a record's keys never straddle two files, so the newest
        # file's end_phy_offset is a record whose keys are all indexed: replays (each restart's
        # catch-up, recovery) skip it and everything before it, and index everything after it.
        files = self.files
        newest = files[-1] if files else None
        indexed = newest is not None and (len(files) > 1 or newest.index_count > 1)
        skip_to = newest.end_phy_offset if indexed and newest is not None else None
        if isinstance(hashes, list):  # the plain path of a small batch
            if not _fresh_and_ordered(phy_offsets, skip_to):  # a put of new records is both
                hashes, phy_offsets, store_timestamps = _fresh_in_log_order_plain(
                    hashes, phy_offsets, store_timestamps, skip_to
                )
            if (
                newest is not None and 0 < len(hashes) <= newest.entries - newest.index_count
            ):  # the loop below, for one file
                newest.put(hashes, phy_offsets, store_timestamps)
                return newest.end_timestamp if newest.index_count >= newest.entries else None
        else:
            hashes, phy_offsets, store_timestamps = _fresh_in_log_order_bulk(
                np.asarray(hashes, dtype=np.int64),
                np.asarray(phy_offsets, dtype=np.int64),
                np.asarray(store_timestamps, dtype=np.int64),
                skip_to,
            )
        finished = None
        first, count, new_file = 0, len(hashes), False
        while first < count:
            index = self._writable(new_file)
            stop = min(first + index.free_entries, count)
            if stop < count and phy_offsets[stop] == phy_offsets[stop - 1]:
                whole = bisect.bisect_left(phy_offsets, phy_offsets[stop], first, stop)
                if whole > first or index.index_count > 1:  # split only a record too big for a file
                    stop = whole
            if stop > first:
                index.put(hashes[first:stop], phy_offsets[first:stop], store_timestamps[first:stop])
            first = stop
            new_file = first < count  # the rest goes to a new file, even if this one has a few free entries
            if new_file or index.is_full:
                finished = index.end_timestamp
        return finished

    def put_lane(self, group: EncodedGroup, physical_start: int, store_timestamp: int) -> int | None:
        """``put`` of a placed lane group's index entries (its records from ``physical_start``, all
        stored at ``store_timestamp``): written by the group into the newest file when they are new
        and fit it, else through ``put``. Returns what ``put`` returns."""
        count = group.index_count
        if not count:
            return None
        files = self.files
        if files:
            newest = files[-1]
            fresh = physical_start > newest.end_phy_offset or (len(files) == 1 and newest.index_count <= 1)
            if fresh and count <= newest.entries - newest.index_count:  # put's one-file branch, as put decides it
                newest.put_lane(group, store_timestamp)
                return newest.end_timestamp if newest.index_count >= newest.entries else None
        hashes, offsets = group.index_entries()
        return self.put(hashes, offsets, [store_timestamp] * count)

    def query(self, key: str, max_count: int, begin: int, end: int) -> list[int]:
        """Physical offsets for ``topic#key`` stored within [begin, end], newest first."""
        key_hash = int(index_key_hashes([key])[0])
        found: dict[int, None] = {}  # each offset once: a crash can leave a record's entry twice
        for index in reversed(self.files):
            if len(found) >= max_count:
                break
            if index.overlaps(begin, end):
                for offset in index.select(key_hash, max_count, begin, end):
                    found.setdefault(int(offset))
                    if len(found) == max_count:
                        break
        return list(found)

    def drop_from(self, damaged: IndexFile) -> int:
        """Destroy ``damaged`` and every newer file; the CommitLog offset to index again from."""
        at = self.files.index(damaged)
        start = damaged.begin_phy_offset if damaged.header_fault() is None else -1
        if start < 0:
            start = self.files[at - 1].end_phy_offset if at else 0
        for index in self.files[at:]:
            index.destroy()
        del self.files[at:]
        return start

    def detach_below(self, commitlog_min: int) -> list[IndexFile]:
        """Take out files whose entries all point below the CommitLog minimum (never the newest).

        The caller destroys them."""
        gone = []
        while len(self.files) > 1 and self.files[0].end_phy_offset < commitlog_min:
            gone.append(self.files.pop(0))
        return gone

    def truncate_after(self, physical_end: int) -> None:
        """Forget the entries of records at or past ``physical_end`` (a CommitLog tail recovery cut).

        A file whose first entry is already past it goes; the file it starts in keeps its entries
        before it (dropping that whole file would lose the keys of records that survived, which the
        replay re-indexes only from the recovery's start).
        """
        while self.files and self.files[-1].end_phy_offset >= physical_end and self.files[-1].index_count > 1:
            newest = self.files[-1]
            if newest.truncate_entries(physical_end) > 1:
                return
            self.files.pop().destroy()

    def flush(self) -> None:
        for index in list(self.files):  # retention may take the oldest out meanwhile
            index.flush()

    def close(self) -> None:
        for index in self.files:
            index.close()


def _fresh_and_ordered(phy_offsets: IntColumn, skip_to: int | None) -> bool:
    """Whether ``_fresh_in_log_order_plain`` would keep the entries as they are."""
    if not len(phy_offsets) or (skip_to is not None and phy_offsets[0] <= skip_to):
        return False
    return len(phy_offsets) == 1 or list(phy_offsets) == sorted(phy_offsets)


def _fresh_in_log_order_plain(
    hashes: IntColumn, phy_offsets: IntColumn, store_timestamps: IntColumn, skip_to: int | None
) -> tuple[list[int], list[int], list[int]]:
    """Entries sorted by physical offset (stable), without those at or below ``skip_to``."""
    order = sorted(range(len(hashes)), key=phy_offsets.__getitem__)
    if skip_to is not None:
        order = [i for i in order if phy_offsets[i] > skip_to]
    return (
        [int(hashes[i]) for i in order],
        [int(phy_offsets[i]) for i in order],
        [int(store_timestamps[i]) for i in order],
    )


def _fresh_in_log_order_bulk(
    hashes: npt.NDArray[np.int64],
    phy_offsets: npt.NDArray[np.int64],
    store_timestamps: npt.NDArray[np.int64],
    skip_to: int | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``_fresh_in_log_order_plain`` with numpy."""
    order = np.argsort(phy_offsets, kind="stable")
    if skip_to is not None:
        order = order[phy_offsets[order] > skip_to]
    return hashes[order], phy_offsets[order], store_timestamps[order]
