"""Store fixtures over real files in tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq.store import FlushDiskType, MessageStore
from support.store_data import tiny_config


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore(tiny_config(tmp_path / "store"))
    s.start()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sync_store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore(tiny_config(tmp_path / "store", flush_disk_type=FlushDiskType.SYNC_FLUSH))
    s.start()
    try:
        yield s
    finally:
        s.close()
