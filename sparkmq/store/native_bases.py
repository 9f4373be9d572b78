"""The bases of MappedFile, MappedFileQueue and ConsumeQueue: C types holding the fields the send
lane's group put reads and writes per queue (``sparkmq/native/segment.c``), or these plain
classes when the native code is off (``SPARKMQ_NATIVE=0``) or not built.

A queue a group put touches then costs a few cache lines (the queue, its file list, the last
segment and the page) instead of a chain of dicts and int objects: at 1,000 queues that chain
was most of the broker's extra CPU per message (docs/design-notes.md, "Per-queue state in C").
Either way the attributes behave as plain ints (and ``_mmap`` as the mapping or None).
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sparkmq.native import queueread

if TYPE_CHECKING or queueread is None:

    class SegmentBase:
        """MappedFile's fields (the C type also caches the mapping's address for the lane)."""

        write_position: int
        flushed_position: int
        file_bytes: int
        start_offset: int
        tick: int  # MapPool: the last use
        _mmap: mmap.mmap | None

    class FileListBase:
        """MappedFileQueue's list of segments."""

        files: list[Any]

    class QueueBase:
        """ConsumeQueue's end and its MappedFileQueue."""

        max_physical_offset: int
        files: Any

    next_tick: Callable[[], int] = itertools.count(1).__next__
else:
    SegmentBase = queueread.Segment
    FileListBase = queueread.FileList
    QueueBase = queueread.QueueBase
    next_tick = queueread.next_tick

__all__ = ["FileListBase", "QueueBase", "SegmentBase", "next_tick"]
