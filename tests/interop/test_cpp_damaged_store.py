"""Damaged ConsumeQueue units under a live broker (its files written to beside it, as a disk or a stray
tool would): the real C++ push consumer and the sparkmq pull consumer read every message past them,
the broker repairs each unit from its CommitLog, logs it with the file and position, and counts it
in its Prometheus metrics (``sparkmq_store_damaged_total``). And CommitLog records whose bodies were
damaged while the broker was stopped: its body CRC check finds them, and the C++ consumer reads
every other message."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkmq.message import layout as L
from sparkmq.message.record import decode_record
from support.client_harness import Clients
from support.processes import BrokerProcess, NamesrvProcess, wait_until
from support.rocketmq_cpp import CppClientRun, require_cpp_python
from support.store_damage import UNIT_KINDS, damage_bytes, damage_unit, damaged_counts, read_unit, unit_path

pytestmark = pytest.mark.timeout(240)
UNITS_FILE_BYTES = 300_000  # SMALL_STORE's mapedFileSizeConsumeQueue
COUNT = 400  # the C++ producer spreads them over 4 queues (defaultTopicQueueNums), 100 each
CLIENT_TIMEOUT_S = 120.0
Damaged = tuple[NamesrvProcess, BrokerProcess, Path, int]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def damaged_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Damaged]:
    """A NameServer and a broker with Prometheus metrics on; the broker's store directory and metrics port."""
    require_cpp_python()
    store, port = tmp_path_factory.mktemp("damaged-store"), _free_port()
    prom = ("metricsExporterType=PROM", "metricsPromExporterHost=127.0.0.1", f"metricsPromExporterPort={port}")
    settings = [arg for setting in prom for arg in ("--set", setting)]
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address, *settings) as broker:
        yield namesrv, broker, store, port


def _cpp(home: Path, command: str, namesrv: str, topic: str, group: str, *args: str) -> list[dict[str, Any]]:
    run = CppClientRun.start(home, command, "--namesrv", namesrv, "--topic", topic, "--group", group, *args)
    try:
        return run.finish(CLIENT_TIMEOUT_S)
    finally:
        run.kill()


def _damage(store_dir: Path, topic: str, positions: list[tuple[int, int, str]]) -> dict[tuple[Path, int], bytes]:
    """Damage unit (queue, offset) of ``topic`` as ``kind`` for each position; what each held."""
    intact = {}
    for queue_id, offset, kind in positions:
        at = unit_path(store_dir, topic, queue_id, offset, UNITS_FILE_BYTES)
        intact[at] = damage_unit(*at, kind)
    return intact


def test_consumers_read_every_message_past_damaged_units_which_are_repaired_and_counted(
    damaged_cluster: Damaged, tmp_path: Path
) -> None:
    namesrv, broker, store, port = damaged_cluster
    topic = f"Damaged_{uuid.uuid4().hex[:12]}"
    sent = _cpp(tmp_path, "produce", namesrv.address, topic, f"PID_{topic}", "--count", str(COUNT))
    assert [r["status"] for r in sent if r["event"] == "sent"] == [0] * COUNT

    # (a) the real C++ push consumer, over one damaged unit of each kind in the first three queues
    first = _damage(store, topic, [(q, 32 + 5 * q, kind) for q, kind in enumerate(UNIT_KINDS)])
    records = _cpp(tmp_path, "push-consume", namesrv.address, topic, f"CID_{topic}", "--count", str(COUNT))
    messages = [r for r in records if r["event"] == "received"]
    assert sorted(int(m["properties"]["seq"]) for m in messages) == list(range(COUNT))
    assert all(m["body"] == f"m-body-{m['properties']['seq']}" for m in messages)
    positions = sorted((m["queue_id"], m["queue_offset"]) for m in messages)
    assert {(0, 32), (1, 37), (2, 42), (3, 20), (0, 50), (1, 60)} <= set(positions)
    # (b) repaired on the disk, (c) counted, and logged with the file and position
    assert {at: read_unit(*at) for at in first} == first
    assert damaged_counts(port, "consumequeue") == {"repaired": 3}
    logged = " ".join(line for line in broker.output if "damaged consumequeue at" in line)
    assert all(f"{at[0]} position {at[1]}" in logged for at in first), logged

    # (a) the sparkmq pull consumer, over three more (the last queue's too)
    second = _damage(store, topic, [(3, 20, "negative_size"), (0, 50, "wild_offset"), (1, 60, "mismatching_head")])
    clients = Clients()
    try:
        consumer = clients.pull(f"CID_{topic}_pull", namesrv.address)
        consumer.assign(consumer.queues_of(topic))
        got: list[Any] = []
        assert wait_until(lambda: bool(got.extend(consumer.poll(1.0))) or len(got) >= COUNT, 60)
    finally:
        clients.close_all()
    assert sorted((m.queue.queue_id, m.queue_offset) for m in got) == positions
    assert {at: read_unit(*at) for at in second} == second
    assert damaged_counts(port, "consumequeue") == {"repaired": 6}


def _record_positions(segment: Path) -> dict[str, int]:
    """Position of each message record of a CommitLog segment, by body."""
    data, pos, found = segment.read_bytes(), 0, {}
    while pos + 8 <= len(data) and int.from_bytes(data[pos + 4 : pos + 8], "big", signed=True) == L.MESSAGE_MAGIC_CODE:
        record = decode_record(data, pos)
        found[bytes(record.body).decode()] = pos
        pos += record.total_size
    return found


def test_records_whose_bodies_were_damaged_while_stopped_are_found_counted_and_skipped(tmp_path: Path) -> None:
    """Stopped cleanly, the broker's next recovery checks from its newest record on: the older
    damaged bodies are left to the body CRC check, which the broker runs after it starts."""
    require_cpp_python()
    store, port, metrics = tmp_path / "store", _free_port(), _free_port()
    prom = ("metricsExporterType=PROM", "metricsPromExporterHost=127.0.0.1", f"metricsPromExporterPort={metrics}")
    settings = [arg for setting in prom for arg in ("--set", setting)]
    topic, damaged = f"DamagedBody_{uuid.uuid4().hex[:12]}", (17, 211)
    with NamesrvProcess.start() as namesrv:
        with BrokerProcess.start(store, namesrv.address, *settings, port=port):
            sent = _cpp(tmp_path, "produce", namesrv.address, topic, f"PID_{topic}", "--count", str(COUNT))
            assert [r["status"] for r in sent if r["event"] == "sent"] == [0] * COUNT
        segment = store / "commitlog" / f"{0:020d}"
        positions = _record_positions(segment)
        for seq in damaged:
            damage_bytes(segment, positions[f"m-body-{seq}"] + L.POS_BODY + 2, b"#")
        with BrokerProcess.start(store, namesrv.address, *settings, port=port) as broker:
            assert wait_until(lambda: damaged_counts(metrics, "commitlog") == {"lost": len(damaged)}, 60)
            logged = " ".join(line for line in broker.output if "damaged commitlog at" in line)
            assert all(f"{segment} position {positions[f'm-body-{seq}']}" in logged for seq in damaged), logged
            expected = COUNT - len(damaged)
            records = _cpp(tmp_path, "push-consume", namesrv.address, topic, f"CID_{topic}", "--count", str(expected))
    messages = [r for r in records if r["event"] == "received"]
    assert sorted(int(m["properties"]["seq"]) for m in messages) == [q for q in range(COUNT) if q not in damaged]
    assert all(m["body"] == f"m-body-{m['properties']['seq']}" for m in messages)
