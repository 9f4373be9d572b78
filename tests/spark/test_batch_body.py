"""The sink's bulk encoder (sparkmq/connector/batch_body.py) against the reference ``Message`` path.

Same bytes as ``encode_batch_items`` over ``Message.encoded_properties`` for the same ids, with
tags and keys present, null or empty; unique ids; rows needing the reference path are refused.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sparkmq.client.message import Message
from sparkmq.connector.batch_body import BulkIds, encode_rows
from sparkmq.errors import MessageError
from sparkmq.message import decode_batch_items, encode_batch_items

COUNT = 300


def batch(**extra: pa.Array) -> pa.RecordBatch:
    columns = {
        "body": pa.array([bytes([i % 256, 1, 2]) * (i % 7) for i in range(COUNT)], pa.binary()),
        "tags": pa.array([None if i % 3 == 0 else "" if i % 11 == 0 else f"tag{i % 5}" for i in range(COUNT)]),
        "keys": pa.array([None if i % 4 == 0 else "" if i % 13 == 0 else f"k{i} order-{i % 9}" for i in range(COUNT)]),
        **extra,
    }
    return pa.RecordBatch.from_arrays(list(columns.values()), list(columns))


@pytest.mark.parametrize("same_on_every_row", [{}, {"SPARKMQ_TXN": "query 3 token"}])
def test_bulk_items_are_the_bytes_of_the_message_path(same_on_every_row: dict[str, str]) -> None:
    rows = batch()
    encoded = encode_rows(rows, BulkIds(), same_on_every_row)
    assert encoded is not None
    body = bytes(encoded.data[encoded.offsets[0] : encoded.offsets[-1]])
    ids = [p.split(b"UNIQ_KEY\x01")[1].decode() for p in decode_batch_items(body).properties]
    assert len(set(ids)) == COUNT and all(len(i) == 32 for i in ids)
    messages = [
        Message("T", r["body"], tags=r["tags"], keys=r["keys"], properties=same_on_every_row) for r in rows.to_pylist()
    ]
    assert body == encode_batch_items(
        [m.body_bytes for m in messages],
        [m.encoded_properties(i) for m, i in zip(messages, ids, strict=True)],
        [0] * COUNT,
    )
    picked = np.array([3, 4, 200, 17])
    assert encoded.body_of(picked) == b"".join(
        bytes(encoded.data[encoded.offsets[r] : encoded.offsets[r + 1]]) for r in picked
    )


@pytest.mark.parametrize(
    "extra",
    [
        {"properties": pa.array([[("a", "b")]] * COUNT, pa.map_(pa.string(), pa.string()))},
        {"delayLevel": pa.array([2] * COUNT, pa.int32())},
    ],
)
def test_rows_for_the_reference_path_are_refused(extra: dict[str, pa.Array]) -> None:
    assert encode_rows(batch(**extra), BulkIds()) is None


def test_keys_that_message_would_normalise_are_refused() -> None:
    rows = batch()
    odd = rows.set_column(2, "keys", pa.array(["a  b"] * COUNT))
    assert encode_rows(odd, BulkIds()) is None
    assert encode_rows(rows.set_column(1, "tags", pa.array(["a\x01b"] * COUNT)), BulkIds()) is None


def test_extra_properties_with_a_separator_are_refused() -> None:
    with pytest.raises(MessageError, match="separator"):
        encode_rows(batch(), BulkIds(), {"SPARKMQ_TXN": "a\x02b"})
