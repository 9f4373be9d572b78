"""The epoch file and the consistent point (EpochFileCache.findConsistentPoint)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmq.broker.ha.epochs import EpochFile, consistent_point
from sparkmq.errors import ConfigError
from sparkmq.protocol.controller_bodies import EpochEntry


def test_the_consistent_point_is_where_the_newest_shared_epoch_ends_first() -> None:
    old_master = [EpochEntry(1, 0)]
    new_master = [EpochEntry(1, 0), EpochEntry(2, 700)]
    assert consistent_point(old_master, 900, new_master, 1000) == 700  # the old master's tail goes
    assert consistent_point(old_master, 600, new_master, 1000) == 600  # a lagging replica keeps all
    assert consistent_point([EpochEntry(1, 0), EpochEntry(2, 700)], 1000, new_master, 1200) == 1000
    assert consistent_point([EpochEntry(3, 0)], 10, new_master, 1000) is None
    assert consistent_point([EpochEntry(1, 0), EpochEntry(2, 650)], 800, new_master, 1000) == 650


def test_the_file_keeps_terms_in_order_and_survives_a_reload(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path)
    epochs.append(1, 0)
    epochs.append(2, 500)
    epochs.append(2, 500)  # the same term again: nothing changes
    with pytest.raises(ValueError):
        epochs.append(1, 900)
    again = EpochFile(tmp_path)
    again.load()
    assert [(e.epoch, e.start_offset) for e in again.entries] == [(1, 0), (2, 500)]
    again.truncate_after(400)
    assert again.last_epoch == 1


def test_a_file_that_is_not_an_epoch_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "epochFileCheckpoint").write_text("1-0\nnot an entry\n")
    with pytest.raises(ConfigError, match="line 2"):
        EpochFile(tmp_path).load()
