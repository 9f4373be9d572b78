"""Columnar decode of many records at once: numpy gathers instead of per-message objects.

``decode_columns(buf)`` returns every fixed field as a numpy column plus the positions of
bodies, topics and properties inside ``buf``. It is the fast path; ``record.iter_records``
is the plain reference and tests check that both agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sparkmq.errors import CorruptRecordError
from sparkmq.message import layout as L
from sparkmq.message.record import HEAD_DTYPE, StoredMessage, decode_record, record_starts

_MAGIC = np.frombuffer(L.MESSAGE_MAGIC_CODE.to_bytes(4, "big", signed=True), dtype=np.uint8)


def at_every_byte(raw: npt.NDArray[np.uint8], dtype: npt.DTypeLike) -> npt.NDArray[np.generic]:
    """``raw`` seen as a ``dtype`` item starting at every byte: ``at_every_byte(raw, ">i4")[starts]``
    reads the int at each start, ``at_every_byte(raw, "V88")[starts]`` copies 88 bytes from each, in
    one numpy gather (no index array per byte). Indexes past ``len(raw) - itemsize`` raise IndexError."""
    width = np.dtype(dtype).itemsize
    return np.ndarray((max(len(raw) - width + 1, 0),), dtype=dtype, buffer=raw, strides=(1,))


def gather_heads(raw: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64]) -> npt.NDArray[np.void]:
    """The 88-byte heads at ``starts`` as a HEAD_DTYPE array (one gather of 88-byte items)."""
    return at_every_byte(raw, f"V{L.HEADER_BYTES}")[starts].view(HEAD_DTYPE)


def find_record_starts(buf: bytes | bytearray | memoryview) -> npt.NDArray[np.int64]:
    """``record_starts`` without a loop per record: every place the magic code sits 4 bytes after a
    would-be start, kept when each one's TOTALSIZE leads exactly to the next and the last to the end.
    A body holding the magic code's bytes breaks that chain: then the reference walks the sizes."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    end = len(raw)
    if end >= L.RECORD_FIXED_BYTES:
        first = np.flatnonzero(raw[4 : end - 3] == _MAGIC[0]) + 4
        magic = first[(raw[first + 1] == _MAGIC[1]) & (raw[first + 2] == _MAGIC[2]) & (raw[first + 3] == _MAGIC[3])]
        starts: npt.NDArray[np.int64] = (magic - 4).astype(np.int64, copy=False)
        if len(starts) and starts[0] == 0:
            stops = starts + at_every_byte(raw, ">i4")[starts].astype(np.int64)
            if (
                stops[-1] == end
                and np.array_equal(stops[:-1], starts[1:])
                and (np.diff(stops, prepend=0) >= L.RECORD_FIXED_BYTES).all()
            ):
                return starts
    return record_starts(buf)


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Many records of one buffer, as columns. ``heads`` has the fields of ``HEAD_DTYPE``."""

    buffer: memoryview
    starts: npt.NDArray[np.int64]
    heads: npt.NDArray[np.void]
    body_starts: npt.NDArray[np.int64]
    body_lengths: npt.NDArray[np.int64]
    topic_starts: npt.NDArray[np.int64]
    topic_lengths: npt.NDArray[np.int64]
    properties_starts: npt.NDArray[np.int64]
    properties_lengths: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.starts)

    def body(self, i: int) -> memoryview:
        """The body of record ``i`` as a view of the buffer."""
        start = int(self.body_starts[i])
        return self.buffer[start : start + int(self.body_lengths[i])]

    def message(self, i: int) -> StoredMessage:
        """Record ``i`` decoded in full (the reference decoder)."""
        return decode_record(self.buffer, int(self.starts[i]))


def decode_columns(buf: bytes | bytearray | memoryview, starts: npt.NDArray[np.int64] | None = None) -> RecordColumns:
    """Decode the records of ``buf`` (at ``starts``, or found by walking sizes) into columns."""
    view = memoryview(buf).cast("B") if isinstance(buf, memoryview) else memoryview(buf)
    if starts is None:
        starts = find_record_starts(view)
    raw = np.frombuffer(view, dtype=np.uint8)
    count = len(starts)
    if count == 0:
        empty = np.zeros(0, dtype=np.int64)
        return RecordColumns(view, empty, np.zeros(0, dtype=HEAD_DTYPE), empty, empty, empty, empty, empty, empty)
    if int(starts.max()) + L.RECORD_FIXED_BYTES > len(raw) or int(starts.min()) < 0:
        raise CorruptRecordError("a record start lies outside the buffer or too close to its end")
    heads = gather_heads(raw, starts)
    totals = heads["total_size"].astype(np.int64)
    body_lengths = heads["body_length"].astype(np.int64)
    if (heads["magic"] != L.MESSAGE_MAGIC_CODE).any():
        bad = int(starts[np.argmax(heads["magic"] != L.MESSAGE_MAGIC_CODE)])
        raise CorruptRecordError(f"record at {bad}: bad magic code")
    if (starts + totals > len(raw)).any() or (body_lengths < 0).any() or (L.POS_BODY + body_lengths + 3 > totals).any():
        raise CorruptRecordError("a record's size or body length runs past its record")
    body_starts = starts + L.POS_BODY
    topic_len_at = body_starts + body_lengths
    topic_lengths = raw[topic_len_at].astype(np.int64)
    props_len_at = topic_len_at + 1 + topic_lengths
    if (props_len_at + 2 > starts + totals).any():  # check before indexing: a bad length must not IndexError
        bad = int(starts[np.argmax(props_len_at + 2 > starts + totals)])
        raise CorruptRecordError(f"record at {bad}: topic length runs past the record")
    props_lengths = at_every_byte(raw, ">u2")[props_len_at].astype(np.int64)
    if (props_lengths > 0x7FFF).any() or (heads["sys_flag"] & (L.BORNHOST_V6_FLAG | L.STOREHOST_V6_FLAG)).any():
        bad = int(starts[np.argmax((props_lengths > 0x7FFF) | ((heads["sys_flag"] & 0x30) != 0))])
        raise CorruptRecordError(f"record at {bad}: negative properties length or IPv6 host flags")
    if (L.RECORD_FIXED_BYTES + body_lengths + topic_lengths + props_lengths != totals).any():
        bad = int(starts[np.argmax(L.RECORD_FIXED_BYTES + body_lengths + topic_lengths + props_lengths != totals)])
        raise CorruptRecordError(f"record at {bad}: TOTALSIZE does not match its field lengths")
    return RecordColumns(
        view, starts, heads, body_starts, body_lengths, topic_len_at + 1, topic_lengths, props_len_at + 2, props_lengths
    )
