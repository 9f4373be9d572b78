"""Stored records → pyarrow RecordBatch in bulk, matching the source schema exactly.

Everything is vectorised: record heads come from one numpy gather (``decode_columns``),
bodies are gathered into one contiguous buffer, properties are split into a
``map<string,string>`` with pyarrow compute, hosts and offset msgIds are formatted with
numpy. Only compressed bodies (rare) are touched one by one.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sparkmq import native
from sparkmq.connector.columns import LEAN_COLUMNS, WIDE_COLUMNS, arrow_schema, source_columns
from sparkmq.message import layout as L
from sparkmq.message.bulk import RecordColumns, at_every_byte, decode_columns
from sparkmq.message.property_scan import find_values

# the lean columns in C (setup.py builds it, optional; None under SPARKMQ_NATIVE=0): the numpy path is the reference
_leanrecords = native.extension("sparkmq.connector._leanrecords")

TIMESTAMP = pa.timestamp("us", tz="UTC")
_LEAN_SCHEMA = arrow_schema(LEAN_COLUMNS)
_LEAN_PROPERTIES_SCHEMA = arrow_schema(source_columns(include_properties=True))
_NATIVE_COLUMNS = (LEAN_COLUMNS, source_columns(include_properties=True))
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
# Each byte's two hex characters as one uint16 (in memory order): one lookup per byte.
_HEX_PAIRS = np.stack([_HEX[np.arange(256) >> 4], _HEX[np.arange(256) & 15]], axis=1).copy().view(np.uint16)[:, 0]
_INLINE = np.arange(12)[None, :]


def _slices(
    raw: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    kind: pa.DataType,
    valid: npt.NDArray[np.bool_] | None = None,
) -> pa.Array:
    """``raw[start:start+length]`` per row as a ``kind`` array (null where ``valid`` is False).

    Slices in buffer order (each ends before the next starts, as fields of consecutive records do)
    are every other element of one array whose offsets alternate start, end over ``raw``: a
    ``take`` of the even ones copies them out in C++. Others go through Arrow binary *views*.
    """
    count = len(starts)
    if valid is not None:
        lengths = np.where(valid, lengths, 0)
    ends = starts + lengths
    if count == 0 or len(raw) >= 2**31 or starts[0] < 0 or ends[-1] > len(raw) or (starts[1:] < ends[:-1]).any():
        return _view_slices(raw, starts, lengths, kind, valid)
    offsets = np.empty(2 * count, dtype=np.int32)
    offsets[0::2] = starts
    offsets[1::2] = ends
    spans = pa.Array.from_buffers(kind, 2 * count - 1, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])
    return spans.take(pa.array(np.arange(0, 2 * count, 2, dtype=np.int32), mask=None if valid is None else ~valid))


def _view_slices(
    raw: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    kind: pa.DataType,
    valid: npt.NDArray[np.bool_] | None,
) -> pa.Array:
    """``_slices`` for any order: 16-byte Arrow binary views (length, then up to 12 inline bytes, or a
    4-byte prefix + buffer offset) pointing into ``raw``, copied out by Arrow's C++ cast."""
    import pyarrow.compute as pc  # lazily: ~40 ms of import the lean C path and Spark's driver-side runner skip

    count = len(starts)
    if count and int(starts.max()) + 12 > len(raw):  # a short string at the very end: read past it into zeros
        raw = np.concatenate([raw, np.zeros(12, dtype=np.uint8)])
    views = np.empty((count, 16), dtype=np.uint8)
    words = views.view(np.int32).reshape(count, 4)
    head = at_every_byte(raw, "V12")[starts].view(np.uint8).reshape(count, 12)
    views[:, 4:] = np.where(lengths[:, None] > _INLINE, head, 0)  # inline bytes past the length are zero
    short = lengths <= 12
    words[:, 0] = lengths
    words[:, 2] = np.where(short, words[:, 2], 0)  # a long one: 4-byte prefix, buffer 0, offset
    words[:, 3] = np.where(short, words[:, 3], starts)
    view_kind = pa.string_view() if kind == pa.string() else pa.binary_view()
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    array = pa.Array.from_buffers(view_kind, count, [validity, pa.py_buffer(views), pa.py_buffer(raw)])
    return pc.cast(array, kind)


def _binary(data: bytes, offsets: npt.NDArray[np.int32], kind: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(kind, len(offsets) - 1, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])


@functools.lru_cache(maxsize=8)
def _constant_string(value: str, count: int) -> pa.Array:
    """``value`` ``count`` times. Cached: Arrow arrays are immutable, and a range read repeats the same
    topic and broker name at the same batch size (pullBatchSize) on every pull."""
    encoded = value.encode("utf-8")
    offsets = (np.arange(count + 1, dtype=np.int64) * len(encoded)).astype(np.int32)
    return _binary(encoded * count, offsets, pa.string())


def _hosts(ips: npt.NDArray[np.uint8], ports: npt.NDArray[np.int32]) -> pa.Array:
    """``a.b.c.d:port`` per row, formatting each distinct host once."""
    packed = (ips.astype(np.uint64) @ np.array([1 << 24, 1 << 16, 1 << 8, 1], dtype=np.uint64)) << np.uint64(16)
    keys = packed | ports.astype(np.uint64)
    unique, index = np.unique(keys, return_inverse=True)
    texts = [
        f"{(k >> 40) & 255}.{(k >> 32) & 255}.{(k >> 24) & 255}.{(k >> 16) & 255}:{k & 65535}" for k in unique.tolist()
    ]
    return pa.DictionaryArray.from_arrays(
        pa.array(index.astype(np.int32)), pa.array(texts, pa.string())
    ).dictionary_decode()


def _offset_msg_ids(columns: RecordColumns) -> pa.Array:
    """Uppercase hex of storeIP | storePort | physicalOffset for every row, without Python loops."""
    heads = columns.heads
    count = len(heads)
    raw = np.empty((count, 16), dtype=np.uint8)
    raw[:, :4] = heads["store_ip"]
    raw[:, 4:8] = heads["store_port"].astype(">i4").view(np.uint8).reshape(count, 4)
    raw[:, 8:] = heads["physical_offset"].astype(">i8").view(np.uint8).reshape(count, 8)
    return hex_strings(raw)


def hex_strings(raw: npt.NDArray[np.uint8]) -> pa.Array:
    """Each row of ``raw`` (count × width bytes) as an uppercase hex string, without Python loops."""
    count, width = raw.shape
    chars = _HEX_PAIRS[raw]  # count × width pairs, C-contiguous: the strings' data as it is
    offsets = (np.arange(count + 1, dtype=np.int64) * 2 * width).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])


def _properties(raw: npt.NDArray[np.uint8], columns: RecordColumns) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array]:
    """(properties map, TAGS, KEYS, UNIQ_KEY) columns from the properties strings."""
    import pyarrow.compute as pc  # lazily, as in _view_slices

    count = len(columns)
    strings = _slices(raw, columns.properties_starts, columns.properties_lengths, pa.string())
    strings = _valid(strings)  # the string kernels below need UTF-8
    items = pc.split_pattern(strings, "\x02")
    flat = pc.list_flatten(items)
    parents = pc.list_parent_indices(items).to_numpy()
    pairs = pc.split_pattern(flat, "\x01", max_splits=1)
    lengths = pc.list_value_length(pairs).to_numpy(zero_copy_only=False)
    keep = lengths == 2
    if not keep.all():
        pairs = pairs.filter(pa.array(keep))
        parents = parents[keep]
    keys = pc.list_element(pairs, 0)
    values = pc.list_element(pairs, 1)
    nonempty = (pc.utf8_length(keys).to_numpy(zero_copy_only=False) > 0) & (
        pc.utf8_length(values).to_numpy(zero_copy_only=False) > 0
    )
    if not nonempty.all():
        mask = pa.array(nonempty)
        keys, values, parents = keys.filter(mask), values.filter(mask), parents[nonempty]
    last = _last_of_each_key(parents, keys)
    if last is not None:
        keys, values, parents = keys.take(pa.array(last)), values.take(pa.array(last)), parents[last]
    map_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(np.bincount(parents, minlength=count), out=map_offsets[1:])
    props = pa.MapArray.from_arrays(pa.array(map_offsets), keys, values)
    key_names = keys.to_numpy(zero_copy_only=False)

    def column(name: str) -> pa.Array:
        where = np.flatnonzero(key_names == name)
        index = np.full(count, -1, dtype=np.int64)
        index[parents[where]] = where  # the last occurrence wins, as in decode_properties
        return values.take(pa.array(index, mask=index < 0))

    return props, column("TAGS"), column("KEYS"), column("UNIQ_KEY")


def _property_values(raw: npt.NDArray[np.uint8], columns: RecordColumns, names: tuple[str, ...]) -> list[pa.Array]:
    """The value of each property in ``names`` per row (null where absent or empty), without the map.

    The properties strings are copied back to back once (one Arrow cast), then scanned with numpy
    (``property_scan.find_values``); the last occurrence of a key wins, as in ``decode_properties``.
    """
    strings = _slices(raw, columns.properties_starts, columns.properties_lengths, pa.binary())
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8) if strings.buffers()[2] else np.zeros(0, np.uint8)
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32, count=len(strings) + 1).astype(np.int64)
    return [
        _slices(data, starts, lengths, pa.string(), lengths >= 0)
        for starts, lengths in find_values(data, offsets, names)
    ]


def _last_of_each_key(parents: npt.NDArray[np.int64], keys: pa.Array) -> npt.NDArray[np.int64] | None:
    """Entries to keep so that no row's map repeats a key (the last occurrence wins, as in
    ``decode_properties``), or None when no row repeats one.

    Repeats are real: a batch sent by RocketMQ's Java/C++ clients carries batch-level properties
    (``WAIT``) that the broker appends to each item's own. ``parents`` is non-decreasing. The
    check is one pass (per row, the OR of one bit per distinct key equals their sum only when no
    key repeats); dropping compares each entry with the next ones of its row, one shift at a time.
    """
    import pyarrow.compute as pc  # lazily, as in _view_slices

    if len(parents) == 0:
        return None
    encoded = pc.dictionary_encode(keys)
    ids = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    counts = np.bincount(parents)
    if len(encoded.dictionary) <= 62:
        starts = (np.cumsum(counts) - counts)[counts > 0]
        bits = np.left_shift(np.int64(1), ids)
        if np.array_equal(np.bitwise_or.reduceat(bits, starts), np.add.reduceat(bits, starts)):
            return None
    drop = np.zeros(len(ids), dtype=bool)
    for shift in range(1, int(counts.max())):
        drop[:-shift] |= (parents[:-shift] == parents[shift:]) & (ids[:-shift] == ids[shift:])
    return np.flatnonzero(~drop) if drop.any() else None


def _bodies(raw: npt.NDArray[np.uint8], columns: RecordColumns) -> pa.Array:
    compressed = np.flatnonzero(columns.heads["sys_flag"] & L.COMPRESSED_FLAG)
    array = _slices(raw, columns.body_starts, columns.body_lengths, pa.binary())
    if len(compressed) == 0:
        return array
    bodies = array.to_pylist()
    for i in compressed.tolist():
        bodies[i] = zlib.decompress(bodies[i])
    return pa.array(bodies, pa.binary())


def _lean_native(
    buffer: bytes | memoryview, broker_name: str, topic: str, columns: tuple[str, ...]
) -> pa.RecordBatch | None:
    """The lean ``columns`` (+ ``properties`` when asked) by the C extension (one walk, one copy per
    field), or None where it declines (not built, an empty or corrupt buffer, compressed bodies, IPv6
    hosts, invalid UTF-8 in a property): the numpy path then runs."""
    if _leanrecords is None:
        return None
    with_properties = "properties" in columns
    decoded = _leanrecords.decode(buffer, True) if with_properties else _leanrecords.decode(buffer)
    if decoded is None:
        return None
    count, queue_ids, offsets, born, stored, *buffers = decoded
    body_at, body, keys_at, keys, keys_ok, tags_at, tags, tags_ok, ids_at, ids, *map_buffers = buffers

    def strings(kind: pa.DataType, at: bytes, data: bytes, valid: bytes | None = None, n: int = count) -> pa.Array:
        validity = None if valid is None else pa.py_buffer(valid)
        return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(at), pa.py_buffer(data)])

    def fixed(kind: pa.DataType, data: bytes, n: int = count) -> pa.Array:
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(data)])

    def properties() -> pa.Array:
        rows_at, names_at, names, values_at, values = map_buffers
        entries = len(names_at) // 4 - 1
        return pa.MapArray.from_arrays(
            fixed(pa.int32(), rows_at, count + 1),
            strings(pa.string(), names_at, names, n=entries),
            strings(pa.string(), values_at, values, n=entries),
        )

    arrays: dict[str, Callable[[], pa.Array]] = {
        "topic": lambda: _constant_string(topic, count),
        "brokerName": lambda: _constant_string(broker_name, count),
        "queueId": lambda: fixed(pa.int32(), queue_ids),
        "queueOffset": lambda: fixed(pa.int64(), offsets),
        "msgId": lambda: strings(pa.string(), ids_at, ids),
        "keys": lambda: strings(pa.string(), keys_at, keys, keys_ok),
        "tags": lambda: strings(pa.string(), tags_at, tags, tags_ok),
        "body": lambda: strings(pa.binary(), body_at, body),
        "properties": properties,
        "bornTimestamp": lambda: fixed(TIMESTAMP, born),
        "storeTimestamp": lambda: fixed(TIMESTAMP, stored),
    }
    schema = _LEAN_SCHEMA if columns == LEAN_COLUMNS else _LEAN_PROPERTIES_SCHEMA
    return pa.RecordBatch.from_arrays([arrays[name]() for name in columns], schema=schema)


def records_to_arrow(
    buffer: bytes | memoryview,
    broker_name: str,
    starts: npt.NDArray[np.int64] | None = None,
    columns: tuple[str, ...] = WIDE_COLUMNS,
    topic: str | None = None,
    native: bool = True,
) -> pa.RecordBatch:
    """Every stored record of ``buffer`` (a PULL body) as one RecordBatch of ``columns``, built in bulk.

    Only the asked columns are computed: without ``properties`` the map is never built (TAGS,
    KEYS and UNIQ_KEY are found in place, which is most of the saving of the lean schema).
    ``topic``: every record's topic, when the caller knows it (a pull reads one queue).
    The lean schema (+ ``properties``) with a known topic goes through the C extension when it is
    built (``native``; False forces the numpy reference path).
    """
    import pyarrow.compute as pc  # lazily, as in _view_slices

    if native and columns in _NATIVE_COLUMNS and topic is not None and starts is None:
        batch = _lean_native(buffer, broker_name, topic, columns)
        if batch is not None:
            return batch
    schema = arrow_schema(columns)
    decoded = decode_columns(buffer, starts)
    count = len(decoded)
    if count == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    raw = np.frombuffer(decoded.buffer, dtype=np.uint8)
    heads = decoded.heads
    if "properties" in columns:
        props, tags, keys, uniq = _properties(raw, decoded)
    else:
        props = None
        tags, keys, uniq = _property_values(raw, decoded, ("TAGS", "KEYS", "UNIQ_KEY"))
    build = {
        "topic": lambda: (
            _constant_string(topic, count)
            if topic is not None
            else _slices(raw, decoded.topic_starts, decoded.topic_lengths, pa.string())
        ),
        "brokerName": lambda: _constant_string(broker_name, count),
        "queueId": lambda: pa.array(heads["queue_id"].astype(np.int32)),
        "queueOffset": lambda: pa.array(heads["queue_offset"].astype(np.int64)),
        "commitLogOffset": lambda: pa.array(heads["physical_offset"].astype(np.int64)),
        "msgId": lambda: pc.coalesce(uniq, _offset_msg_ids(decoded)) if uniq.null_count else uniq,
        "keys": lambda: keys,
        "tags": lambda: tags,
        "body": lambda: _bodies(raw, decoded),
        "properties": lambda: props,
        "bornTimestamp": lambda: pa.array(heads["born_timestamp"].astype(np.int64) * 1000, TIMESTAMP),
        "storeTimestamp": lambda: pa.array(heads["store_timestamp"].astype(np.int64) * 1000, TIMESTAMP),
        "bornHost": lambda: _hosts(heads["born_ip"], heads["born_port"].astype(np.int32)),
        "storeHost": lambda: _hosts(heads["store_ip"], heads["store_port"].astype(np.int32)),
        "reconsumeTimes": lambda: pa.array(heads["reconsume_times"].astype(np.int32)),
    }
    # Property bytes are the sender's (any bytes, from a broken or hostile one): see _valid.
    return pa.RecordBatch.from_arrays([_valid(build[name]()) for name in columns], schema=schema)


def _valid(array: pa.Array) -> pa.Array:
    """``array``, or when it holds invalid UTF-8, its values decoded with those bytes replaced by
    U+FFFD, as RocketMQ's broker (Java's UTF-8 decoder) and ``decode_properties`` read them: an Arrow
    string column must hold UTF-8 (Spark and pyarrow may fail on anything else)."""
    try:
        array.validate(full=True)
        return array
    except pa.ArrowInvalid:
        return _decoded(array)


def _decoded(array: pa.Array) -> pa.Array:
    """A string or string map ``array`` decoded from its bytes with invalid UTF-8 replaced (U+FFFD)."""

    def text(value: bytes | None) -> str | None:
        return None if value is None else value.decode("utf-8", "replace")

    kind = array.type
    if pa.types.is_string(kind):
        return pa.array([text(v) for v in array.cast(pa.binary()).to_pylist()], kind)
    if pa.types.is_map(kind):
        rows = array.cast(pa.map_(pa.binary(), pa.binary())).to_pylist()
        return pa.array([None if row is None else [(text(k), text(v)) for k, v in row] for row in rows], kind)
    return array
