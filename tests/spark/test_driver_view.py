"""``DriverView``: the source's driver side on blocking sockets, checked against the broker itself.

Spark's per-query source runner asks routes and offsets and commits the group's offsets; these
tests ask a real NameServer and broker the same through the view and through the harness's own
protocol-level questions, and break its sockets under it. No Spark.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from sparkmq.client import Message
from sparkmq.connector.driver_view import DriverView
from sparkmq.errors import OptionError, RemoteError, TopicNotExistError
from sparkmq.protocol import RequestCode
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.offset_headers import OffsetResponseHeader, TopicQueueRequestHeader
from support.spark_harness import Cluster, Names

QUEUES = 3


@pytest.fixture
def view(cluster: Cluster, names: Names) -> Iterator[DriverView]:
    made = DriverView(cluster.ns, names.group)
    yield made
    made.close()


@pytest.fixture(scope="module")
def filled(cluster: Cluster) -> tuple[str, int]:
    """A topic with 5, 6 and 7 messages in its queues; and a time before the first."""
    topic = cluster.topic(queues=QUEUES)
    before = int(time.time() * 1000) - 1
    for queue_id in range(QUEUES):
        cluster.send([Message(topic, b"m%d" % i) for i in range(5 + queue_id)], queue_id)
    return topic, before


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_queues_and_offsets_are_the_brokers(cluster: Cluster, view: DriverView, filled: tuple[str, int]) -> None:
    topic, before = filled
    queues = view.queues([topic])
    assert sorted(q.queue_id for q in queues) == list(range(QUEUES))
    assert view.max_offsets(queues) == {q: cluster.max_offset(topic, q.queue_id) for q in queues}
    assert [view.max_offsets(queues)[q] for q in sorted(queues, key=lambda q: q.queue_id)] == [5, 6, 7]
    assert view.min_offsets(queues) == {q: 0 for q in queues}
    assert view.offsets_for_timestamp(queues, before) == {q: 0 for q in queues}
    assert view.queues(assign={topic: (2, 0)}) == [
        MessageQueue(topic, "broker-a", 2),
        MessageQueue(topic, "broker-a", 0),
    ]


def test_a_commit_lands_in_the_offset_manager_and_reads_back(
    cluster: Cluster, view: DriverView, names: Names, filled: tuple[str, int]
) -> None:
    topic, _ = filled
    queues = sorted(view.queues([topic]), key=lambda q: q.queue_id)
    assert view.committed(queues) == {q: -1 for q in queues}  # a fresh group has none, even where 0 is the start
    view.commit({queues[0]: 0, queues[2]: 4})
    assert (cluster.committed(names.group, topic, 0), cluster.committed(names.group, topic, 2)) == (0, 4)
    assert topic in cluster.group_topics(names.group)
    # Once the group has offsets for the topic, the broker answers 0 for its other queues (as RocketMQ's does).
    assert view.committed(queues) == {queues[0]: 0, queues[1]: 0, queues[2]: 4}


def test_unknown_topics_and_queues_are_named(view: DriverView, filled: tuple[str, int]) -> None:
    topic, _ = filled
    with pytest.raises(TopicNotExistError):
        view.queues(["NoSuchTopic_driver_view"])
    assert view.queues(["NoSuchTopic_driver_view"], pattern="NoSuch.*") == []
    with pytest.raises(OptionError, match=r"queues \[9\]"):
        view.queues(assign={topic: (0, 9)})


def test_a_pattern_matches_user_topics(view: DriverView, filled: tuple[str, int]) -> None:
    topic, _ = filled
    found = view.queues(pattern=topic[:-3] + ".*")
    assert {q.topic for q in found} == {topic}


def test_a_socket_closed_under_the_view_is_replaced(
    cluster: Cluster, view: DriverView, names: Names, filled: tuple[str, int]
) -> None:
    """The broker closes idle connections; the next call must reconnect, not fail (nor commit twice wrong)."""
    topic, _ = filled
    queues = sorted(view.queues([topic]), key=lambda q: q.queue_id)
    view.max_offsets(queues)
    kept = list(view._connections.values())
    assert kept  # the view keeps its sockets between calls
    for connection in kept:
        connection._sock.shutdown(socket.SHUT_RDWR)  # as a peer's close looks from here
    view.commit({queues[1]: 3})
    assert cluster.committed(names.group, topic, 1) == 3
    assert view.max_offsets(queues)[queues[2]] == 7


def test_an_unreachable_address_hands_its_requests_to_the_next(cluster: Cluster, view: DriverView) -> None:
    """A broker's master that cannot be reached: its requests go to the next address (a slave in a real
    deployment), as the client's ``invoke_read_broker`` does; the last one's failure raises."""
    topic = cluster.topic(queues=1)
    cluster.send([Message(topic, b"x")], 0)
    fields = TopicQueueRequestHeader(topic, 0).to_fields()
    dead = f"127.0.0.1:{free_port()}"
    [(command, _)] = view._exchange([([dead, cluster.broker.address], RequestCode.GET_MAX_OFFSET, fields)], 3.0)
    assert OffsetResponseHeader.from_fields(command.ext_fields).offset == 1
    with pytest.raises(RemoteError, match="cannot connect"):
        view._exchange([([dead], RequestCode.GET_MAX_OFFSET, fields)], 3.0)
