"""Types of the C extension sparkmq.native._queueread (queueread.c, indexput.c)."""

from collections.abc import Iterable

#: (scanned units, any removed, records taken, body, queue offsets, physical offsets, sizes); the
#: last three as native-endian int64 bytes. Body and columns are None when nothing was taken.
Read = tuple[int, int, int, bytes | None, bytes | None, bytes | None, bytes | None]
#: A CommitLog segment a read may copy from: (its base offset, its mapping, its write position).
SegmentView = tuple[int, memoryview, int]

def gather(
    units: bytes,
    offset: int,
    commitlog_min: int,
    tags_codes: Iterable[int] | None,
    max_count: int,
    max_bytes: int,
    segments: tuple[SegmentView, ...],
    queue_id: int,
    topic: bytes,
) -> Read | int | None: ...
def gather_into(
    units: bytes,
    offset: int,
    commitlog_min: int,
    tags_codes: Iterable[int] | None,
    max_count: int,
    max_bytes: int,
    segments: tuple[SegmentView, ...],
    queue_id: int,
    topic: bytes,
    out: bytearray | memoryview,
) -> tuple[int, int, int | bytes] | int | None: ...
def index_put(
    mapping: object,
    slots: int,
    index_count: int,
    begin_timestamp: int,
    hashes: list[int],
    phy_offsets: list[int],
    store_timestamps: list[int],
) -> int: ...
def gather_frame(
    units: bytes,
    offset: int,
    commitlog_min: int,
    tags_codes: Iterable[int] | None,
    max_count: int,
    max_bytes: int,
    segments: tuple[SegmentView, ...],
    queue_id: int,
    topic: bytes,
    parts: tuple[bytes, bytes, bytes, bytes, bytes, bytes],
    opaque: int,
    suggest: int,
    slow_suggest: int,
    slow_below: int,
    min_offset: int,
    max_offset: int,
) -> tuple[bytes, int, int] | int | None: ...
