"""Dispatch columns: the plain path and the bulk path against a reference built on decode_properties."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.message.hashing import java_string_hash
from sparkmq.message.properties import decode_properties, find_property
from sparkmq.message.record import SMALL_BATCH_MAX
from sparkmq.store.dispatch import (
    SCHEDULE_TOPIC,
    TagsCoder,
    dispatch_columns_bulk,
    dispatch_columns_plain,
    request_for_put,
)
from sparkmq.store.index_file import index_key_hashes

DELAYS = [1000, 5000, 10000]
KEY_NAMES = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"MYTAGS", b"TAGSX", b"UNIQ_KEYS", b"XKEYS", b"K"]
value_bytes = st.one_of(
    st.just(b""),
    st.sampled_from(
        [b"TagA", b"1", b"2", b"3", b"x", b"order-1 order-2", b" a  b ", b"\xc3\xa9t\xc3\xa9", b"\xff\xfe"]
    ),
    st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), max_size=10).map(str.encode),
)


@st.composite
def properties_strings(draw: st.DrawFn) -> bytes:
    items = [draw(st.sampled_from(KEY_NAMES)) + b"\x01" + draw(value_bytes) for _ in range(draw(st.integers(0, 6)))]
    raw = b"\x02".join(items)
    return raw + b"\x02" if draw(st.booleans()) else raw


batches = st.lists(properties_strings(), min_size=1, max_size=20)
topics = st.sampled_from(["TopicTest", "%RETRY%group", SCHEDULE_TOPIC])


def reference_columns(
    topic: str, properties: list[bytes], timestamps: list[int]
) -> tuple[list[int], list[int], list[int]]:
    """Tags codes and index keys from decode_properties and java_string_hash, record by record."""
    codes, hashes, rows = [], [], []
    maps = [decode_properties(raw) for raw in properties]
    for ts, props in zip(timestamps, maps, strict=True):
        if topic == SCHEDULE_TOPIC:
            try:  # int() of the bytes, as the store parses it: ASCII digits only
                level = min(max(int(props.get("DELAY", "0").encode()), 1), len(DELAYS))
            except ValueError:
                level = 1
            codes.append(ts + DELAYS[level - 1])
        else:
            codes.append(java_string_hash(props["TAGS"]) if "TAGS" in props else 0)
    for row, props in enumerate(maps):
        if "UNIQ_KEY" in props:
            hashes.append(int(index_key_hashes([f"{topic}#{props['UNIQ_KEY']}"])[0]))
            rows.append(row)
    for row, props in enumerate(maps):
        for token in props.get("KEYS", "").split(" "):
            if token:
                hashes.append(int(index_key_hashes([f"{topic}#{token}"])[0]))
                rows.append(row)
    return codes, hashes, rows


@settings(max_examples=300, deadline=None)
@given(topics, batches)
def test_plain_and_bulk_columns_equal_the_reference(topic: str, properties: list[bytes]) -> None:
    timestamps = [1_700_000_000_000 + i for i in range(len(properties))]
    expected = reference_columns(topic, properties, timestamps)
    plain = dispatch_columns_plain(TagsCoder(DELAYS), topic, properties, timestamps)
    bulk = dispatch_columns_bulk(TagsCoder(DELAYS), topic, properties, np.array(timestamps, dtype=np.int64))
    assert plain == expected
    assert tuple(column.tolist() for column in bulk) == expected
    assert all(column.dtype == np.int64 for column in bulk)


def test_repeated_and_missing_tags_regression() -> None:
    """One record repeats TAGS and the next lacks it: the count of matches equals the count of records."""
    properties = [b"TAGS\x01A\x02TAGS\x01B", b"KEYS\x01x"]
    assert [find_property(raw, b"TAGS") for raw in properties] == [b"B", None]
    codes, _, _ = dispatch_columns_bulk(TagsCoder(DELAYS), "T", properties, np.zeros(2, dtype=np.int64))
    assert codes.tolist() == [java_string_hash("B"), 0]


def test_request_for_put_takes_lists_for_small_batches_and_arrays_for_large() -> None:
    coder = TagsCoder(DELAYS)
    n = SMALL_BATCH_MAX
    props = [b"TAGS\x01A\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U"] * (n + 1)
    small = request_for_put(coder, "T", 0, 5, props[:n], list(range(n)), [100] * n, 42)
    large = request_for_put(coder, "T", 0, 5, props, np.arange(n + 1), np.full(n + 1, 100), 42)
    assert isinstance(small.tags_codes, list) and isinstance(large.tags_codes, np.ndarray)
    assert small.tags_codes == large.tags_codes.tolist()[:n]
    assert small.index_rows == [r for r in large.index_rows.tolist() if r < n]
    assert small.store_timestamps == [42] * n
