"""What the store raises when the operating system refuses it: StoreIOError saying what it was doing."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from sparkmq.errors import PropertiesTooLargeError, StoreError, StoreIOError
from sparkmq.message.layout import MAX_PROPERTIES_BYTES
from sparkmq.store import MessageStore, PutMessageStatus
from support.store_data import make_batch, tiny_config


def test_a_store_root_that_is_a_file_fails_with_what_the_store_was_doing(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"x")
    store = MessageStore(tiny_config(blocker / "store"))

    with pytest.raises(StoreIOError) as raised:
        store.start()

    assert isinstance(raised.value, StoreError)
    assert raised.value.remark.startswith(f"creating the store directory {blocker / 'store'} failed")
    assert raised.value.errno == errno.ENOTDIR
    assert isinstance(raised.value.__cause__, OSError)


def test_oversized_properties_are_told_apart_by_their_exception_type(tmp_path: Path) -> None:
    with MessageStore(tiny_config(tmp_path / "s")) as store:
        batch = make_batch("T", 0, 1)
        oversized = type(batch)(batch.topic, 0, batch.bodies, [b"k\x01" + b"v" * MAX_PROPERTIES_BYTES + b"\x02"])

        result = store.put_messages(oversized)

    assert result.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    with pytest.raises(PropertiesTooLargeError):
        oversized.check_sizes(store.config.max_message_bytes)
