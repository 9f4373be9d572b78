"""A slave's dispatch of replicated runs (``MessageStore.append_replica``, then ``dispatch_replica``): the
records it checked are dispatched without a second scan (a dispatch left behind scans the log from where
it stands), small runs of interleaved queues gathered per queue with one index put, long runs with numpy
columns. Fed the master's CommitLog in cuts that split records and cross segment ends, the
slave's ConsumeQueues are byte for byte the master's, and its index finds every key the master's does."""

from __future__ import annotations

from pathlib import Path

from sparkmq.store import MessageStore
from sparkmq.store.replica import read_run
from support.store_data import make_batch, tiny_config

QUEUES = [("T", 0), ("T", 1), ("U", 0), ("U", 3)]


def test_a_slave_fed_interleaved_runs_holds_the_masters_queues_and_index(tmp_path: Path) -> None:
    master, slave = MessageStore(tiny_config(tmp_path / "master")), MessageStore(tiny_config(tmp_path / "slave"))
    master.start()
    slave.start()
    slave.slave_mode = True
    counts = dict.fromkeys(QUEUES, 0)
    try:
        for n in range(120):  # single sends interleaving four queues, a long batch now and then
            topic, queue_id = QUEUES[n % len(QUEUES)]
            size = 40 if n % 37 == 5 else 1
            assert master.put_messages(make_batch(topic, queue_id, size, start=counts[topic, queue_id])).ok
            counts[topic, queue_id] += size
        cuts = [700, 3_000, 250, 9_000]
        offset, n = master.commitlog.min_offset, 0
        while offset < master.commitlog.max_offset:
            run = read_run(master.commitlog, offset, cuts[n % len(cuts)])
            assert run
            slave.append_replica(offset, run)
            if n % 3 != 1:  # a dispatch left behind now and then: the next one catches up from the log
                slave.dispatch_replica()
            offset, n = offset + len(run), n + 1
        slave.dispatch_replica()
        assert slave.replica_records_end == master.commitlog.max_offset
        for topic, queue_id in QUEUES:
            assert slave.max_offset_in_queue(topic, queue_id) == counts[topic, queue_id]
            for key in ("key0", f"key{counts[topic, queue_id] - 1}"):
                found = sorted(m.queue_offset for m in slave.query_messages(topic, key, 100))
                assert found == sorted(m.queue_offset for m in master.query_messages(topic, key, 100))
                assert found
    finally:
        master.close()
        slave.close()
    for topic, queue_id in QUEUES:
        folder = Path("consumequeue") / topic / str(queue_id)
        files = sorted(p.name for p in (tmp_path / "master" / folder).iterdir())
        assert files == sorted(p.name for p in (tmp_path / "slave" / folder).iterdir())
        for name in files:
            ours, theirs = tmp_path / "slave" / folder / name, tmp_path / "master" / folder / name
            assert ours.read_bytes() == theirs.read_bytes()
