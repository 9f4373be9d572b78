"""A byte of an early CommitLog record flipped while a SYNC-flush broker was down after kill -9: the
restarted broker serves every other acknowledged message and reports the damaged one (its log, with
the file and position, and ``sparkmq_store_damaged_total``), whether the record's ConsumeQueue is
intact (a read's body CRC check or the background check finds it) or lost with its file and rebuilt by
the start-up replay, which steps over the record instead of ending there."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq.message import layout as L
from sparkmq.message.record import decode_record
from support.client_harness import Clients, create_topic, message, read_queue, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess, wait_until
from support.rocketmq_java import free_port
from support.store_damage import damage_bytes, damaged_counts

pytestmark = pytest.mark.timeout(180)
COUNT, DAMAGED = 150, 12


@pytest.fixture(scope="module")
def namesrv() -> Iterator[NamesrvProcess]:
    with NamesrvProcess.start() as process:
        yield process


def _broker(store: Path, namesrv: str, port: int, metrics: int) -> BrokerProcess:
    settings = (
        "flushDiskType=SYNC_FLUSH",
        "metricsExporterType=PROM",
        "metricsPromExporterHost=127.0.0.1",
        f"metricsPromExporterPort={metrics}",
    )
    return BrokerProcess.start(store, namesrv, *[arg for s in settings for arg in ("--set", s)], port=port)


def _position_of(segment: Path, body: bytes) -> int:
    """Position of the record with ``body`` in a CommitLog segment."""
    data, pos = segment.read_bytes(), 0
    while int.from_bytes(data[pos + 4 : pos + 8], "big", signed=True) == L.MESSAGE_MAGIC_CODE:
        record = decode_record(data, pos)
        if bytes(record.body) == body:
            return pos
        pos += record.total_size
    raise AssertionError(f"no record of {body!r} in {segment}")


@pytest.mark.parametrize("queue_lost", [False, True], ids=["queue-intact", "queue-lost"])
def test_after_kill_9_a_damaged_record_hides_no_other_acknowledged_message(
    namesrv: NamesrvProcess, tmp_path: Path, queue_lost: bool
) -> None:
    store, port, metrics = tmp_path / "store", free_port(), free_port()
    topic, anchor = f"Flip_{uuid.uuid4().hex[:10]}", f"Anchor_{uuid.uuid4().hex[:10]}"
    broker = _broker(store, namesrv.address, port, metrics)
    clients = Clients()
    try:
        create_topic([broker.address], topic, 1)
        create_topic([broker.address], anchor, 1)
        wait_for_route(namesrv.address, topic, {"broker-a"})
        wait_for_route(namesrv.address, anchor, {"broker-a"})
        producer = clients.producer(f"PID_{topic}", namesrv.address)
        acked = {i for i in range(COUNT) if producer.send(message(topic, i)).status.name == "SEND_OK"}
        assert acked == set(range(COUNT))
        assert producer.send(message(anchor, 0)).status.name == "SEND_OK"  # the newest queue tail
        clients.close_all()
        broker.kill()
        segment = store / "commitlog" / f"{0:020d}"
        position = _position_of(segment, f"body-{DAMAGED}".encode())
        damage_bytes(segment, position + L.POS_BODY + 2, b"#")
        if queue_lost:
            for path in sorted((store / "consumequeue" / topic).rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
        broker = _broker(store, namesrv.address, port, metrics)
        outcome = "skipped" if queue_lost else "lost"  # found by the replay, or by a read / the background check
        pull = clients.pull(f"CID_{topic}", namesrv.address)
        got = [m for queue in pull.queues_of(topic) for m in read_queue(pull, queue)]
        assert sorted(int(m.properties["seq"]) for m in got) == [i for i in range(COUNT) if i != DAMAGED]
        assert wait_until(lambda: damaged_counts(metrics, "commitlog") == {outcome: 1}, 30)
        logged = " ".join(line for line in broker.output if "damaged commitlog at" in line)
        assert f"{segment} position {position}" in logged, logged
    finally:
        clients.close_all()
        broker.stop()
