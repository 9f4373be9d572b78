"""``BrokerView.read_range`` with several pulls in flight: every offset of the range once, in order,
also when the broker answers shorter than asked (its byte limit, a tag filter) so the pulls sent
ahead started at the wrong offset and are sent again. No Spark: the executors' read path alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from sparkmq import source
from sparkmq.client import Message
from sparkmq.connector import planned_reads
from sparkmq.connector.broker_view import BrokerView
from sparkmq.connector.options import SourceOptions
from sparkmq.connector.planned_reads import PULLS_AHEAD
from sparkmq.connector.view_cache import ViewCache
from sparkmq.message.bulk import decode_columns
from support.spark_harness import Cluster, running_cluster

QUEUE_ID = 1
MESSAGES = 120


@pytest.fixture(scope="module")
def short_pulls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A broker whose pull answers stop at 3,000 bytes (about 10 of these records)."""
    store = tmp_path_factory.mktemp("short-pulls")
    with running_cluster(store, "--set", "maxTransferBytesOnMessageInMemory=3000") as made:
        yield made


@pytest.fixture(scope="module")
def filled(short_pulls: Cluster) -> Iterator[tuple[BrokerView, str]]:
    topic = short_pulls.topic(queues=2)
    bodies = [b"x" * (50 + 37 * (i % 7)) for i in range(MESSAGES)]  # uneven sizes: the advance varies
    short_pulls.send(
        [Message(topic, body, tags="even" if i % 2 == 0 else "odd") for i, body in enumerate(bodies)], QUEUE_ID
    )
    view = BrokerView(short_pulls.ns, "CID_read_range")
    yield view, topic
    view.close()


def offsets_read(view: BrokerView, topic: str, start: int, end: int, batch: int, expression: str = "*") -> list[int]:
    queue = next(q for q in view.queues([topic]) if q.queue_id == QUEUE_ID)
    found: list[int] = []
    for body in view.read_range(queue, start, end, batch, expression):
        found += decode_columns(body).heads["queue_offset"].tolist()
    return [o for o in found if start <= o < end]


@pytest.mark.parametrize(("start", "end", "batch"), [(0, MESSAGES, 64), (7, 101, 16), (0, MESSAGES, 1), (5, 6, 4)])
def test_every_offset_once_in_order_when_pulls_come_back_short(
    filled: tuple[BrokerView, str], start: int, end: int, batch: int
) -> None:
    assert PULLS_AHEAD > 1  # else nothing is predicted
    view, topic = filled

    assert offsets_read(view, topic, start, end, batch) == list(range(start, end))


def test_a_tag_filter_skips_only_filtered_records(filled: tuple[BrokerView, str]) -> None:
    view, topic = filled

    assert offsets_read(view, topic, 3, 90, 8, "even") == list(range(4, 90, 2))


def test_stopping_early_drops_the_pulls_in_flight(filled: tuple[BrokerView, str]) -> None:
    view, topic = filled
    queue = next(q for q in view.queues([topic]) if q.queue_id == QUEUE_ID)
    bodies = view.read_range(queue, 0, MESSAGES, 4)
    first = next(bodies)
    bodies.close()

    assert decode_columns(first).heads["queue_offset"].tolist()[0] == 0
    assert offsets_read(view, topic, 0, MESSAGES, 4) == list(range(MESSAGES))  # the view still reads


@pytest.mark.parametrize("break_after", [0, 1, 3])
def test_a_broken_pull_socket_goes_on_through_the_client(
    filled: tuple[BrokerView, str], caplog: pytest.LogCaptureFixture, break_after: int
) -> None:
    """The task's own pull socket breaks (here: shut down under it, as a broker restart would) before the
    first or a later body: the rest of the range comes through the client, every offset once, in order."""
    view, topic = filled
    queue = next(q for q in view.queues([topic]) if q.queue_id == QUEUE_ID)
    planned_reads.pull_sockets.close_idle()
    assert offsets_read(view, topic, 0, 8, 4) == list(range(8))  # leaves one idle pull socket
    (connection,) = planned_reads.pull_sockets.idle()
    found: list[int] = []
    bodies = view.read_range(queue, 0, MESSAGES, 4)
    for index, body in enumerate(bodies):
        if index == break_after:
            connection._sock.shutdown(socket.SHUT_RDWR)
        found += decode_columns(body).heads["queue_offset"].tolist()
    assert [o for o in found if o < MESSAGES] == list(range(MESSAGES))
    assert "through the client" in caplog.text
    assert connection not in planned_reads.pull_sockets.idle()  # closed, not lent again


def test_an_idle_pull_socket_closed_meanwhile_is_replaced(
    filled: tuple[BrokerView, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A pooled pull socket that was closed while idle (as a broker closes idle connections) is not
    lent again: the next read opens a new one and stays on the direct path."""
    view, topic = filled
    planned_reads.pull_sockets.close_idle()
    assert offsets_read(view, topic, 0, 8, 4) == list(range(8))
    (stale,) = planned_reads.pull_sockets.idle()
    stale._sock.shutdown(socket.SHUT_RDWR)

    assert offsets_read(view, topic, 0, MESSAGES, 4) == list(range(MESSAGES))
    assert "through the client" not in caplog.text
    (fresh,) = planned_reads.pull_sockets.idle()
    assert fresh is not stale


@pytest.mark.parametrize(("start", "end"), [(0, MESSAGES), (7, 101), (3, 4)])
def test_the_source_yields_each_offset_of_its_range_once(filled: tuple[BrokerView, str], start: int, end: int) -> None:
    """``source.read_range``: one RecordBatch per pull, each offset of [start, end) once and in order
    (the last pull's records past the end trimmed off)."""
    view, topic = filled
    options = SourceOptions.parse(
        {"namesrvAddr": view.namesrv_addr, "topic": topic, "pullBatchSize": "4"}, streaming=False
    )
    part = source.QueueRange(topic, "broker-a", QUEUE_ID, start, end)

    batches = list(source.read_range(options, view.group, part))

    assert [o for b in batches for o in b.column("queueOffset").to_pylist()] == list(range(start, end))


def test_a_process_that_read_through_a_cached_view_exits_without_unclosed_sockets(
    filled: tuple[BrokerView, str],
) -> None:
    """Spark's Python workers keep their views (``view_for``) for the process's life; at exit the
    idle direct pull sockets are closed, not left to the collector (a ResourceWarning each)."""
    view, topic = filled
    script = (
        "import sys\n"
        "from sparkmq.connector.broker_view import view_for\n"
        "from sparkmq.message.bulk import decode_columns\n"
        "view = view_for(sys.argv[1], 'CID_exit_check')\n"
        "queue = next(q for q in view.queues([sys.argv[2]]) if q.queue_id == int(sys.argv[3]))\n"
        "n = sum(len(decode_columns(body).heads['queue_offset']) for body in view.read_range(queue, 0, 20, 8, '*'))\n"
        "print('read', n)\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-c", script, view.namesrv_addr, topic, str(QUEUE_ID)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:1] == ["read"] and int(done.stdout.split()[1]) >= 20
    assert "unclosed" not in done.stderr, done.stderr


def test_a_view_no_read_leases_any_more_stops_its_client(short_pulls: Cluster) -> None:
    """Spark's workers outlive queries: a leased view left idle closes its client (no more heartbeats
    or route refreshes to a cluster nothing reads), and the next lease starts a fresh one."""
    topic = short_pulls.topic(queues=1)
    short_pulls.send([Message(topic, b"idle-view")], 0)
    gone = threading.Event()

    def close(view: BrokerView) -> None:
        view.close()
        gone.set()

    cache: ViewCache[BrokerView] = ViewCache(BrokerView, lambda _view: None, close_idle=close, idle_s=0.05)
    with cache.lease(short_pulls.ns, "CID_idle_view") as view:
        queue = view.queues([topic])[0]
        assert [len(b) > 0 for b in view.read_range(queue, 0, 1, 1)] == [True]
        tasks = list(view._reader.instance._tasks)
        assert tasks and not any(task.done() for task in tasks)  # heartbeats and route refreshes running
    assert gone.wait(30), "the idle view was never closed"
    assert all(task.done() for task in tasks)
    with cache.lease(short_pulls.ns, "CID_idle_view") as fresh:
        assert fresh is not view and fresh.max_offsets([queue]) == {queue: 1}
    for left in cache.take_all():
        left.close()
