"""Short-circuit local reads (``connector/local_reads.py``): a read task beside the broker reads its
queues from the store's files, record for record what pulls answer; whatever the files cannot prove
is pulled from the broker, from the offset where the files stopped.

Real NameServer and broker processes over a store of small segments (64 KiB CommitLog segments,
ConsumeQueue files of 50 units), so reads cross both kinds of file; the messages go one by one to
the queues in turn, so each queue's records are scattered through the log. The broker's own count
of messages it handed out to pulls shows where records came from.
"""

from __future__ import annotations

import logging
import pickle
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from sparkmq import source
from sparkmq.client import Message
from sparkmq.client.security import ClientSecurity
from sparkmq.client.selector import MessageSelector
from sparkmq.connector import broker_view, local_reads, planned_reads
from sparkmq.connector.direct_pull import PullConnection
from sparkmq.connector.local_reads import LocalQueueReads, LocalReadDeclined, StoreFiles
from sparkmq.connector.options import SourceOptions
from sparkmq.errors import OptionError
from sparkmq.message import layout as L
from sparkmq.native import queueread
from sparkmq.protocol import RequestCode
from sparkmq.protocol.bodies import MessageQueue
from support.spark_harness import BROKER, Cluster, running_cluster
from support.store_damage import UNIT_KINDS, damage_unit, read_unit, unit_path

pytestmark = pytest.mark.skipif(queueread is None, reason="local reads use the native gather")

QUEUES = 3
PER_QUEUE = 150
SMALL_FILES = ("--set", "mapedFileSizeCommitLog=65536", "--set", "mapedFileSizeConsumeQueue=1000")


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str, Path]]:
    store = tmp_path_factory.mktemp("local") / "store"
    with running_cluster(store, *SMALL_FILES) as cluster:
        topic = cluster.topic(queues=QUEUES)
        for i in range(PER_QUEUE * QUEUES):
            body = f"{i % QUEUES}-{i // QUEUES}-".encode() * (1 + i % 40)  # 6 to ~400 bytes
            cluster.send([Message(topic, body, tags=f"T{i % 2}", keys=f"k{i}")], i % QUEUES)
        yield cluster, topic, store
        broker_view.close_views()


def read(cluster: Cluster, topic: str, group: str, local: bool) -> pa.Table:
    """Every record of ``topic`` through the executors' read path on partitions the reader planned."""
    options = SourceOptions.parse(
        {"namesrvAddr": cluster.ns, "topic": topic, "consumerGroup": group, "pullBatchSize": "64"}
        | {"localReads": str(local).lower()},
        streaming=False,
    )
    parts = pickle.loads(pickle.dumps(source.SparkmqBatchReader(options).partitions()))
    return pa.Table.from_batches([batch for part in parts for batch in source.read_ranges(options, group, part)])


def broker_files(store: Path) -> StoreFiles:
    files = StoreFiles.from_broker_config(
        {
            "storePathRootDir": str(store.absolute()),
            "mapedFileSizeCommitLog": "65536",
            "mapedFileSizeConsumeQueue": "1000",
        }
    )
    assert files is not None
    return files


def verified_connections() -> dict[str, StoreFiles | None]:
    return {connection.address: files for connection, files in local_reads._stores.items()}


def test_local_reads_give_what_pulls_give(filled: tuple[Cluster, str, Path]) -> None:
    cluster, topic, store = filled
    pulled = read(cluster, topic, "CID_local_pulled", local=False)
    assert verified_connections().get(cluster.broker.address) is None  # never asked without the option

    from_files = read(cluster, topic, "CID_local_files", local=True)

    assert pulled.num_rows == QUEUES * PER_QUEUE
    assert from_files.equals(pulled)
    assert verified_connections()[cluster.broker.address] == broker_files(store)


def test_a_broken_socket_at_the_probe_reads_through_the_client(
    filled: tuple[Cluster, str, Path], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pooled socket is broken when a range starts (a broker restart broke it; under TLS the pool
    cannot peek at it, modelled by its ``alive`` answering yes): the probe fails, nothing is read from
    the files on its word, and the client reads that range; every offset once, in order."""
    cluster, topic, _ = filled
    expected = read(cluster, topic, "CID_local_broken", local=False)
    planned_reads.pull_sockets.close_idle()
    read(cluster, topic, "CID_local_broken_first", local=True)  # leaves one idle socket, its store known
    (connection,) = planned_reads.pull_sockets.idle()
    connection._sock.shutdown(socket.SHUT_RDWR)
    monkeypatch.setattr(connection, "alive", lambda: True)
    before = cluster.served()

    found = read(cluster, topic, "CID_local_broken", local=True)

    assert found.equals(expected)
    assert "through the client" in caplog.text
    # The first range (queue 0) whole from the broker; the broken socket is dropped, and the next ranges
    # go over a new one whose probe (one record each) proves the files again.
    assert cluster.served() - before == PER_QUEUE + (QUEUES - 1)
    assert connection not in planned_reads.pull_sockets.idle()


def test_local_reads_pull_only_each_ranges_probe(filled: tuple[Cluster, str, Path]) -> None:
    """Over sockets the broker hands out every record; reading its files, one per range (the probe)."""
    cluster, topic, _ = filled
    before = cluster.served()
    read(cluster, topic, "CID_local_counted_pulls", local=False)
    pulled = cluster.served() - before
    read(cluster, topic, "CID_local_counted_files", local=True)

    assert pulled == QUEUES * PER_QUEUE
    assert cluster.served() - before - pulled == QUEUES  # one range per queue


def damaged_copy(store: Path, into: Path, topic: str, queue_offset: int) -> StoreFiles:
    """A copy of ``store`` in which queue 0's record at ``queue_offset`` claims another queue offset."""
    shutil.copytree(store, into)
    files = broker_files(into)
    with LocalQueueReads(files, topic, 0) as reads:
        physical = int.from_bytes(reads._units(queue_offset, 1)[:8], "big")
    segment = Path(files.commitlog_dir) / f"{physical - physical % files.commitlog_file_bytes:020d}"
    with segment.open("r+b") as log:
        log.seek(physical % files.commitlog_file_bytes + L.POS_QUEUE_OFFSET)
        log.write((queue_offset + 1000).to_bytes(8, "big"))
    return files


def test_a_record_its_unit_does_not_name_is_declined_and_the_rest_pulled(
    filled: tuple[Cluster, str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Files that disagree with their units (a record where another stood, as after a crash's
    truncation): the read stops there and the broker serves the rest, each offset once, in order."""
    cluster, topic, store = filled
    files = damaged_copy(store, tmp_path / "copy", topic, 70)
    with LocalQueueReads(files, topic, 0) as reads:
        with pytest.raises(LocalReadDeclined, match="ConsumeQueue unit 70 is damaged"):
            reads.read(64, 16)
        assert reads.read(0, 64)[1] == 50  # the records before it are served (to the end of the units' file)

    expected = read(cluster, topic, "CID_local_damaged", local=False)
    connection = pooled_connection(cluster)
    local_reads._stores[connection] = files  # this connection's broker "has" the damaged files
    try:
        with caplog.at_level(logging.INFO, logger="sparkmq.connector.planned_reads"):
            found = read(cluster, topic, "CID_local_damaged", local=True)
    finally:
        local_reads._stores[connection] = broker_files(store)
    assert found.equals(expected)
    assert "local read at offset 50 declined" in caplog.text  # the read of units 50-99


def test_units_damaged_under_the_broker_are_declined_and_a_spark_batch_read_has_every_message(
    filled: tuple[Cluster, str, Path], spark: object
) -> None:
    """A unit of each queue damaged in the live store's files (negative size, wild offset, a record
    of another queue offset): the C gather copies nothing on their word, each task's read declines
    there and pulls the rest, the broker repairs the units from its CommitLog, and the batch read by
    Spark (local reads on, the default) completes with every message."""
    cluster, topic, store = filled
    expected = read(cluster, topic, "CID_local_damage_expected", local=False)
    files = broker_files(store)
    intact = {}
    for queue_id, kind in enumerate(UNIT_KINDS):
        at = unit_path(store, topic, queue_id, 71 + queue_id, files.consumequeue_file_bytes)
        intact[at] = damage_unit(*at, kind)
        with LocalQueueReads(files, topic, queue_id) as reads, pytest.raises(LocalReadDeclined):
            reads.read(64, 16)

    frame = (
        spark.read.format("sparkmq")  # type: ignore[attr-defined]
        .option("namesrvAddr", cluster.ns)
        .option("topic", topic)
        .option("consumerGroup", "CID_local_damage_spark")
        .load()
    )
    rows = frame.select("queueId", "queueOffset", "body").collect()

    def keyed(table: pa.Table) -> list[tuple[int, int, bytes]]:
        columns = table.select(["queueId", "queueOffset", "body"]).to_pydict()
        return sorted(zip(columns["queueId"], columns["queueOffset"], columns["body"], strict=True))

    assert sorted((r.queueId, r.queueOffset, bytes(r.body)) for r in rows) == keyed(expected)
    assert len(rows) == QUEUES * PER_QUEUE
    assert {at: read_unit(*at) for at in intact} == intact  # repaired on the disk


def pooled_connection(cluster: Cluster) -> PullConnection:
    (connection,) = [c for c in planned_reads.pull_sockets.idle() if c.address == cluster.broker.address]
    return connection


def test_files_that_are_not_the_brokers_fail_the_probe(filled: tuple[Cluster, str, Path], tmp_path: Path) -> None:
    """The probe compares one pulled record with the files' one: a store that differs there is not the broker's."""
    cluster, topic, store = filled
    queue = MessageQueue(topic, BROKER, 0)
    connection = PullConnection(cluster.broker.address, None, timeout_s=5.0)
    other = damaged_copy(store, tmp_path / "other", topic, 70)
    try:
        with LocalQueueReads(broker_files(store), topic, 0) as own, LocalQueueReads(other, topic, 0) as foreign:
            assert local_reads.same_store(connection, own, "CID_probe", queue, 70) is True
            assert local_reads.same_store(connection, foreign, "CID_probe", queue, 70) is False
            assert local_reads.same_store(connection, foreign, "CID_probe", queue, 69) is True  # a copy, up to there
            assert local_reads.same_store(connection, own, "CID_probe", queue, PER_QUEUE) is None
            assert local_reads.store_files(connection) == broker_files(store)
            assert local_reads.proven(connection, own, "CID_probe", queue, 0)
            # as if the broker restarted on another store: the probe fails, and the files are not asked again
            assert not local_reads.proven(connection, foreign, "CID_probe", queue, 70)
            assert local_reads._stores[connection] is None
            assert local_reads.store_files(connection) is None
    finally:
        connection.close()


def test_a_connection_with_acl_credentials_reads_through_the_broker(filled: tuple[Cluster, str, Path]) -> None:
    """The broker checks an account's permission on each topic; the files cannot: never asked, never read."""
    cluster, _, _ = filled
    connection = PullConnection(cluster.broker.address, ClientSecurity.of("RocketMQ", "12345678"), timeout_s=5.0)
    try:
        assert local_reads.store_files(connection) is None
        assert connection not in local_reads._stores
    finally:
        connection.close()


def test_missing_files_are_declined(filled: tuple[Cluster, str, Path], tmp_path: Path) -> None:
    """A ConsumeQueue file or CommitLog segment that is not there (retention deleted it) is no local read."""
    _, topic, store = filled
    shutil.copytree(store, tmp_path / "copy")
    files = broker_files(tmp_path / "copy")
    first_units = Path(files.consumequeue_dir) / topic / "0" / f"{0:020d}"
    first_units.unlink()
    with LocalQueueReads(files, topic, 0) as reads:
        with pytest.raises(LocalReadDeclined, match="no ConsumeQueue file"):
            reads.read(0, 10)
        assert reads.read(50, 10)[1] == 60  # the next file's units are there
    (Path(files.commitlog_dir) / f"{0:020d}").unlink()
    with LocalQueueReads(files, topic, 1) as reads, pytest.raises(LocalReadDeclined, match="no CommitLog segment at 0"):
        reads.read(0, 10)


def test_the_broker_names_its_store_by_absolute_path(filled: tuple[Cluster, str, Path]) -> None:
    cluster, _, store = filled
    connection = PullConnection(cluster.broker.address, None, timeout_s=5.0)
    try:
        from sparkmq.protocol.ops_bodies import parse_properties_text

        _, body = connection.answer(connection.send_request(RequestCode.GET_BROKER_CONFIG, {}))
        properties = parse_properties_text(bytes(body))
    finally:
        connection.close()
    assert properties["storePathRootDir"] == str(store.absolute())
    assert StoreFiles.from_broker_config(properties) == broker_files(store)


@pytest.mark.parametrize(
    "properties",
    [
        {"storePathRootDir": "store", "mapedFileSizeCommitLog": "65536", "mapedFileSizeConsumeQueue": "1000"},
        {"storePathRootDir": "/no/such/store", "mapedFileSizeCommitLog": "65536", "mapedFileSizeConsumeQueue": "1000"},
        {"storePathRootDir": "/", "mapedFileSizeConsumeQueue": "1000"},
        {"storePathRootDir": "/", "mapedFileSizeCommitLog": "x", "mapedFileSizeConsumeQueue": "1000"},
    ],
    ids=["relative", "not-here", "no-segment-size", "bad-segment-size"],
)
def test_store_files_need_absolute_paths_that_exist_here_and_sizes(properties: dict[str, str]) -> None:
    assert StoreFiles.from_broker_config(properties) is None


def test_only_reads_without_a_filter_go_to_the_files() -> None:
    assert local_reads.usable("*")
    assert not local_reads.usable("TagA || TagB")
    assert not local_reads.usable(MessageSelector.by_sql("a > 1"))


def test_the_local_reads_option() -> None:
    base = {"namesrvAddr": "127.0.0.1:9876", "topic": "T"}
    assert SourceOptions.parse(base).local_reads is True
    assert SourceOptions.parse(base | {"localReads": "false"}).local_reads is False
    with pytest.raises(OptionError, match="localReads"):
        SourceOptions.parse(base | {"localReads": "sometimes"})
