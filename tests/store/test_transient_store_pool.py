"""TransientStorePool: appends land in pooled buffers, the commit writes them into the CommitLog files.

What a commit wrote survives a SIGKILL (it is in the page cache) and recovery heals the
ConsumeQueues around what did not; reads see buffered appends before their commit; the flush
covers committed bytes only; SYNC flush and slaves refuse the pool.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparkmq.broker.config import BrokerConfig
from sparkmq.errors import ConfigError
from sparkmq.store import FlushDiskType, GetMessageStatus, MessageStore, StoreConfig
from support import store_checks as sc

_HERE = Path(__file__).parent
_REPO = _HERE.parent.parent
sys.path.insert(0, str(_HERE))
from tsp_writer import batch, tsp_config  # noqa: E402 - the writer script's own settings

SEED = 35
BATCHES = 200  # several 48 KiB segments: the two-buffer pool runs dry and the rolls commit


def _file_bytes(store: MessageStore, physical_offset: int, size: int) -> bytes:
    segment = store.commitlog.queue.find(physical_offset)
    assert segment is not None
    fd = os.open(segment.path, os.O_RDONLY)
    try:
        return os.pread(fd, size, physical_offset - segment.start_offset)
    finally:
        os.close(fd)


def test_reads_see_buffered_appends_and_the_file_gets_them_at_commit(tmp_path: Path) -> None:
    with MessageStore(tsp_config(tmp_path)) as store:
        pool = store.transient_pool
        assert pool is not None and pool.available == 2
        expected = batch(SEED, 0)
        put = store.put_messages(expected.batch())
        got = store.get_messages("g", sc.TOPIC, expected.queue_id, 0, 32)
        assert got.status is GetMessageStatus.FOUND and got.message_count == len(expected.bodies)
        size = int(put.sizes.sum())
        assert not any(_file_bytes(store, put.wrote_offset, size))
        assert store.flusher.flush_commitlog() == 0  # nothing committed, nothing to sync
        store.flusher.commit_commitlog()
        assert _file_bytes(store, put.wrote_offset, size) == got.body()[:size]
        assert store.flusher.flush_commitlog() == store.commitlog.max_offset
        for seq in range(1, BATCHES):
            assert store.put_messages(batch(SEED, seq).batch()).ok
        assert len(store.commitlog.queue.files) > 3  # rolled past the pool's two buffers
        store.flusher.commit_commitlog()
        assert pool.available == 1  # every full segment gave its buffer back; the current one holds one
        sc.check_consistent(store)


def test_what_was_committed_survives_sigkill_and_recovery_drops_the_rest(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), str(_REPO / "tests"), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [sys.executable, str(_HERE / "tsp_writer.py"), str(tmp_path), str(SEED), str(BATCHES)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(_REPO),
    )
    try:
        assert proc.stdout is not None
        committed_line = proc.stdout.readline().split()
        uncommitted_line = proc.stdout.readline().split()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert committed_line[0] == "committed", committed_line
    assert uncommitted_line[0] == "uncommitted", uncommitted_line
    committed = int(committed_line[1])
    first_lost, lost, visible, on_disk = map(int, uncommitted_line[1:])
    assert lost > 0 and visible == 1 and on_disk == 0  # readable before its commit, not in the file

    with MessageStore(tsp_config(tmp_path)) as store:
        assert store.commitlog.max_offset == committed
        queues = sc.check_consistent(store)
        stored = sorted(sc.seq_of(m) for messages in queues.values() for m in messages)
        assert stored == [(seq, i) for seq in range(BATCHES) for i in range(len(batch(SEED, seq).bodies))]
        assert first_lost == BATCHES
        assert store.put_messages(batch(SEED, BATCHES).batch()).ok  # the recovered store takes puts again
    with MessageStore(tsp_config(tmp_path)) as store:  # a clean close committed what the pool held
        stored_after = sum(len(messages) for messages in sc.check_consistent(store).values())
        assert stored_after == len(stored) + len(batch(SEED, BATCHES).bodies)


def test_sync_flush_and_slaves_refuse_the_pool(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="transientStorePoolEnable=true needs flushDiskType=ASYNC_FLUSH"):
        StoreConfig(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, transient_store_pool_enable=True)
    with pytest.raises(ConfigError, match="transientStorePoolEnable=true is for a master"):
        BrokerConfig.from_properties(
            {"transientStorePoolEnable": "true", "brokerRole": "SLAVE", "brokerId": "1", "brokerName": "b"}
        )
    config = BrokerConfig.from_properties(
        {"transientStorePoolEnable": "true", "transientStorePoolSize": "3", "commitIntervalCommitLog": "50"}
    )
    store = config.store_config()
    assert (store.transient_store_pool_enable, store.transient_store_pool_size, store.commit_interval_commitlog_ms) == (
        True,
        3,
        50,
    )
    with pytest.raises(ConfigError, match="SYNC_FLUSH"):
        BrokerConfig.from_properties({"transientStorePoolEnable": "true", "flushDiskType": "SYNC_FLUSH"}).store_config()
