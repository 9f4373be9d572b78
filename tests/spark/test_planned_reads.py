"""A read task at the broker addresses its partition carries from the driver's plan: no client start,
no NameServer request; and when that address is stale (the broker moved, stopped) or the socket
breaks, the rest of the range through the process's client — every offset once, in order.

Real NameServer and broker processes; a broker "moves" by stopping and starting again on the same
store at a new port. No Spark scheduler: the executors' read path (``source.read_ranges``) on
partitions planned by the source's own reader and pickled as Spark ships them.
"""

from __future__ import annotations

import pickle
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sparkmq import source
from sparkmq.client import Message
from sparkmq.connector import broker_view, planned_reads
from sparkmq.connector.options import SourceOptions
from support.processes import BrokerProcess, NamesrvProcess
from support.spark_harness import Cluster, running_cluster

QUEUES = 2
PER_QUEUE = 60


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    with running_cluster(tmp_path_factory.mktemp("planned")) as cluster:
        topic = cluster.topic(queues=QUEUES)
        for queue_id in range(QUEUES):
            cluster.send([Message(topic, f"{queue_id}-{i}".encode()) for i in range(PER_QUEUE)], queue_id)
        yield cluster, topic
        broker_view.close_views()


def closed_port_address() -> str:
    """A loopback address nobody listens on (a port just released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def planned(namesrv: str, topic: str, group: str) -> tuple[SourceOptions, list[source.QueueRanges]]:
    """The batch reader's partitions (one per queue, whole queue), through pickle as Spark sends them;
    read over the sockets (reads from the broker's files beside it: test_local_reads.py)."""
    options = SourceOptions.parse(
        {"namesrvAddr": namesrv, "topic": topic, "consumerGroup": group, "pullBatchSize": "8", "localReads": "false"},
        streaming=False,
    )
    parts = source.SparkmqBatchReader(options).partitions()
    return options, pickle.loads(pickle.dumps(parts))


def positions(options: SourceOptions, group: str, parts: list[source.QueueRanges]) -> list[tuple[int, int]]:
    return [
        (row["queueId"], row["queueOffset"])
        for part in parts
        for batch in source.read_ranges(options, group, part)
        for row in batch.select(["queueId", "queueOffset"]).to_pylist()
    ]


EVERY = [(q, o) for q in range(QUEUES) for o in range(PER_QUEUE)]


def started_views() -> set[str]:
    return {key[1] for key in broker_view._cache.cached_keys()}


def test_planned_partitions_carry_the_broker_address_and_are_read_without_a_client(
    filled: tuple[Cluster, str],
) -> None:
    cluster, topic = filled
    options, parts = planned(cluster.ns, topic, "CID_planned_direct")

    assert {r.addresses for p in parts for r in p.ranges} == {(cluster.broker.address,)}
    assert positions(options, "CID_planned_direct", parts) == EVERY
    assert "CID_planned_direct" not in started_views()  # no BrokerView: no client, no route request


def test_a_dead_first_address_goes_on_to_the_next_planned_one(
    filled: tuple[Cluster, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A master that cannot be reached: the slave addresses after it are tried before the client."""
    cluster, topic = filled
    options, parts = planned(cluster.ns, topic, "CID_planned_second")
    dead = closed_port_address()
    parts = [source.QueueRanges(tuple(replace(r, addresses=(dead, *r.addresses)) for r in p.ranges)) for p in parts]

    assert positions(options, "CID_planned_second", parts) == EVERY
    assert "CID_planned_second" not in started_views()
    assert "through the client" not in caplog.text


@pytest.mark.parametrize("break_after", [0, 2])
def test_a_broken_planned_socket_goes_on_through_the_client(
    filled: tuple[Cluster, str], caplog: pytest.LogCaptureFixture, break_after: int
) -> None:
    """The planned socket breaks (shut down under it, as a broker restart would) before the first or a
    later body: the rest of the range comes through the client, every offset once, in order."""
    cluster, topic = filled
    group = f"CID_planned_broken_{break_after}"
    options, parts = planned(cluster.ns, topic, group)
    planned_reads.pull_sockets.close_idle()
    assert positions(options, group, parts[:1]) == [(0, o) for o in range(PER_QUEUE)]  # leaves one idle socket
    (connection,) = planned_reads.pull_sockets.idle()
    found: list[int] = []
    for index, batch in enumerate(source.read_ranges(options, group, parts[0])):
        if index == break_after:
            connection._sock.shutdown(socket.SHUT_RDWR)
        found += batch.column("queueOffset").to_pylist()

    assert found == list(range(PER_QUEUE))
    assert "through the client" in caplog.text
    assert group in started_views()
    assert connection not in planned_reads.pull_sockets.idle()


def test_a_broker_that_moved_after_planning_is_read_through_the_client_once(tmp_path: Path) -> None:
    """Partitions planned, then the broker restarts on the same store at another port (the NameServer
    learns the new address): the tasks find nobody at the planned address and read each offset once
    through the client, which asks the NameServer."""
    store = tmp_path / "store"
    with NamesrvProcess.start() as namesrv:
        before = BrokerProcess.start(store, namesrv.address)
        try:
            cluster = Cluster(namesrv, before)
            topic = cluster.topic(queues=QUEUES)
            for queue_id in range(QUEUES):
                cluster.send([Message(topic, f"{queue_id}-{i}".encode()) for i in range(PER_QUEUE)], queue_id)
            cluster.close()
            options, parts = planned(namesrv.address, topic, "CID_planned_moved")
        finally:
            before.stop()
        with BrokerProcess.start(store, namesrv.address) as after:
            assert after.address != before.address
            assert {r.addresses for p in parts for r in p.ranges} == {(before.address,)}
            try:
                assert positions(options, "CID_planned_moved", parts) == EVERY
                assert "CID_planned_moved" in started_views()  # the fallback's client
            finally:
                broker_view.close_views()
