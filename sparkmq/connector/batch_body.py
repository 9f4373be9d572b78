"""Sink rows → SEND_BATCH_MESSAGE items in bulk, from the Arrow columns, with no ``Message`` per row.

Each item is ``size | magic 0 | crc 0 | flag 0 | body length | body | properties length (i16) |
properties`` (``sparkmq.message.batch``), properties being ``TAGS\\x01t\\x02KEYS\\x01k\\x02WAIT\\x01true\\x02
UNIQ_KEY\\x01id`` as ``Message.encoded_properties`` writes them. Heads and lengths come from numpy,
the properties and the items from one pyarrow ``binary_join_element_wise`` each: the items of a
whole Arrow batch end up in one contiguous buffer, and a run of rows is a slice of it.

``encode_rows`` returns None for rows it does not handle (a ``properties`` or ``delayLevel``
column, keys needing normalisation, separators in tags or keys); the sink then builds ``Message``
objects, the reference path, which gives the same bytes.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from sparkmq.connector.arrow import hex_strings
from sparkmq.errors import MessageTooLargeError
from sparkmq.message.layout import MAX_PROPERTIES_BYTES
from sparkmq.message.properties import encode_properties

ITEM_HEAD = np.dtype([("size", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("flag", ">i4"), ("body_length", ">i4")])
SEPARATORS = "[\x01\x02]"
FALLBACK_COLUMNS = ("properties", "delayLevel")


class BulkIds:
    """Unique message ids (``UNIQ_KEY``) many at a time, in ``UniqueIdGenerator``'s layout:
    ip | pid | 4 random bytes | ms since the month began | 16-bit counter, as 32 uppercase hex."""

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01") -> None:
        self._prefix = np.frombuffer(ip + (os.getpid() & 0xFFFF).to_bytes(2, "big") + os.urandom(4), dtype=np.uint8)
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next_ids(self, count: int) -> pa.Array:
        with self._lock:
            first = next(self._counter)
            self._counter = itertools.count(first + count)
        now = datetime.now(UTC)
        month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        stamp = int((time.time() - month.timestamp()) * 1000) & 0xFFFFFFFF
        raw = np.empty((count, 16), dtype=np.uint8)
        raw[:, :10] = self._prefix
        raw[:, 10:14] = np.frombuffer(stamp.to_bytes(4, "big"), dtype=np.uint8)
        raw[:, 14:] = (
            (np.arange(first, first + count, dtype=np.int64) & 0xFFFF).astype(">u2").view(np.uint8).reshape(count, 2)
        )
        return hex_strings(raw)


@dataclass(frozen=True)
class EncodedRows:
    """The items of a batch's rows, back to back in ``data``; row ``i`` is ``data[offsets[i]:offsets[i+1]]``."""

    items: pa.Array  # keeps the buffer of ``data`` alive
    data: memoryview
    offsets: npt.NDArray[np.int64]

    def body_of(self, rows: npt.NDArray[np.int64]) -> bytes:
        """A SEND_BATCH body holding ``rows`` in order: one slice per run of consecutive rows (round-robin
        runs that straddle two Arrow batches' alignment are two runs, not one slice per row)."""
        first, last = int(rows[0]), int(rows[-1])
        if last - first + 1 == len(rows):
            return bytes(self.data[self.offsets[first] : self.offsets[last + 1]])
        cuts = np.flatnonzero(np.diff(rows) != 1) + 1
        starts = self.offsets[rows[np.concatenate(([0], cuts))]].tolist()
        ends = self.offsets[rows[np.concatenate((cuts - 1, [len(rows) - 1]))] + 1].tolist()
        data = self.data
        return b"".join(data[start:end] for start, end in zip(starts, ends, strict=True))


def _optional(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    if name not in batch.schema.names:
        return None
    column = batch.column(name)
    return None if column.null_count == len(column) else column


def _property(name: str, values: pa.Array) -> pa.Array:
    """``name\x01value\x02`` per row; empty where the value is null or empty (as ``encoded_properties``)."""
    joined = pc.binary_join_element_wise(f"{name}\x01", values, "\x02", "", null_handling="emit_null")
    return pc.if_else(pc.greater(pc.fill_null(pc.binary_length(values), 0), 0), joined, "")


def encode_rows(batch: pa.RecordBatch, ids: BulkIds, extra: Mapping[str, str] | None = None) -> EncodedRows | None:
    """The SEND_BATCH items of every row of ``batch`` (body, optional tags and keys, and the same ``extra``
    properties on every row, first, as ``Message(properties=extra)`` puts them), or None (see module doc)."""
    count = batch.num_rows
    prefix = encode_properties(extra) + b"\x02" if extra else b""  # MessageError for a separator in them
    if any(_optional(batch, name) is not None for name in FALLBACK_COLUMNS):
        return None
    tags, keys = _optional(batch, "tags"), _optional(batch, "keys")
    for column in (tags, keys):
        if column is not None and pc.any(pc.match_substring_regex(column, SEPARATORS)).as_py():
            return None
    if keys is not None and pc.any(pc.match_substring_regex(keys, "^ |  | $")).as_py():
        return None  # Message drops empty keys between spaces: leave those to it
    bodies = batch.column("body")
    if bodies.type != pa.binary():
        bodies = pc.cast(bodies, pa.binary())
    given = [_property(name, column) for name, column in (("TAGS", tags), ("KEYS", keys)) if column is not None]
    props = pc.binary_join_element_wise(*given, pa.scalar("WAIT\x01true\x02UNIQ_KEY\x01"), ids.next_ids(count), "")
    if prefix:
        props = pc.binary_join_element_wise(pa.scalar(prefix.decode()), props, "")
    props_lengths = pc.binary_length(props).to_numpy(zero_copy_only=False).astype(np.int64)
    if count and props_lengths.max() > MAX_PROPERTIES_BYTES:
        row = int(np.argmax(props_lengths))
        raise MessageTooLargeError(
            f"properties of row {row} are {props_lengths[row]} bytes, over {MAX_PROPERTIES_BYTES}"
        )
    body_lengths = pc.fill_null(pc.binary_length(bodies), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    heads = np.zeros(count, dtype=ITEM_HEAD)
    heads["size"] = heads.itemsize + body_lengths + 2 + props_lengths
    heads["body_length"] = body_lengths
    items = pc.binary_join_element_wise(
        _fixed_width(heads.view(np.uint8).reshape(count, heads.itemsize)),
        bodies,
        _fixed_width(props_lengths.astype(">i2").view(np.uint8).reshape(count, 2)),
        pc.cast(props, pa.binary()),
        b"",
    )
    offsets = np.frombuffer(items.buffers()[1], dtype=np.int32, count=count + 1, offset=items.offset * 4).astype(
        np.int64
    )
    return EncodedRows(items, memoryview(items.buffers()[2]), offsets)


def _fixed_width(rows: npt.NDArray[np.uint8]) -> pa.Array:
    count, width = rows.shape
    return pa.Array.from_buffers(
        pa.binary(),
        count,
        [None, pa.py_buffer((np.arange(count + 1) * width).astype(np.int32)), pa.py_buffer(np.ascontiguousarray(rows))],
    )
