"""SQL92 subscriptions through sparkmq's clients against a real broker with enablePropertyFilter=true:
the pull and push consumers receive exactly the matching messages, tag selectors still work, and a
broker without the property filter or a bad expression gives a named error."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sparkmq import MessageSelector, RemoteError
from sparkmq.protocol import ResponseCode
from support.client_harness import Inbox, create_topic, message, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

SQL = "seq >= 20 AND color = 'red'"  # message(i) has seq=i, color=("red", "green", "blue")[i % 3]
MATCHING = [i for i in range(60) if i >= 20 and i % 3 == 0]


@pytest.fixture(scope="module")
def sql_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A NameServer and a broker with the SQL92 property filter on: (namesrv, broker) addresses."""
    store = tmp_path_factory.mktemp("sql-store")
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(store, namesrv.address, "--set", "enablePropertyFilter=true") as broker,
    ):
        yield namesrv.address, broker.address


def filled_topic(ns: str, broker: str, clients, count: int = 60) -> str:
    topic = f"Sql_{uuid.uuid4().hex[:10]}"
    create_topic([broker], topic, 2)
    wait_for_route(ns, topic, {"broker-a"})
    producer = clients.producer("PID_sql", ns)
    for i in range(count):
        producer.send(message(topic, i))
    return topic


def test_pull_consumer_subscribed_by_sql_gets_only_matches(sql_cluster, clients) -> None:
    ns, broker = sql_cluster
    topic = filled_topic(ns, broker, clients)
    consumer = clients.pull(f"CID_{uuid.uuid4().hex[:8]}", ns, auto_commit_interval_s=None)
    consumer.subscribe(topic, MessageSelector.by_sql(SQL))
    got: list[int] = []
    while len(got) < len(MATCHING):
        batch = consumer.poll(timeout_s=5.0)
        assert batch, f"only {sorted(got)} arrived"
        got += [int(m.properties["seq"]) for m in batch]
    assert sorted(got) == MATCHING
    assert consumer.poll(timeout_s=0.2) == []


def test_push_consumer_subscribed_by_sql_gets_only_matches(sql_cluster, clients) -> None:
    ns, broker = sql_cluster
    topic = filled_topic(ns, broker, clients)
    inbox = Inbox()
    clients.push(f"CID_{uuid.uuid4().hex[:8]}", ns, topic, inbox.listener("c1"), MessageSelector.by_sql(SQL))
    inbox.wait_distinct(len(MATCHING), 30.0, topic)
    got = sorted(int(r.message.properties["seq"]) for r in inbox.snapshot(topic=topic))
    assert got == MATCHING


def test_tag_selectors_keep_working_beside_sql(sql_cluster, clients) -> None:
    ns, broker = sql_cluster
    topic = filled_topic(ns, broker, clients, 30)
    consumer = clients.pull(f"CID_{uuid.uuid4().hex[:8]}", ns, auto_commit_interval_s=None)
    consumer.subscribe(topic, MessageSelector.by_tag("Tag1 || Tag2"))
    got: list[int] = []
    while len(got) < 20:
        batch = consumer.poll(timeout_s=5.0)
        assert batch
        got += [int(m.properties["seq"]) for m in batch]
    assert sorted(got) == [i for i in range(30) if i % 3]


def test_a_bad_expression_is_a_named_error_with_its_position(sql_cluster, clients) -> None:
    ns, broker = sql_cluster
    topic = filled_topic(ns, broker, clients, 1)
    consumer = clients.pull(f"CID_{uuid.uuid4().hex[:8]}", ns, auto_commit_interval_s=None)
    consumer.subscribe(topic, MessageSelector.by_sql("seq >= AND color = 'red'"))
    with pytest.raises(RemoteError) as caught:
        consumer.poll(timeout_s=1.0)
    assert caught.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 8" in caught.value.remark


def test_a_broker_without_the_property_filter_refuses_sql(cluster, clients) -> None:
    topic = cluster.topic(queues=1)
    consumer = clients.pull(f"CID_{uuid.uuid4().hex[:8]}", cluster.ns, auto_commit_interval_s=None)
    consumer.subscribe(topic, MessageSelector.by_sql(SQL))
    with pytest.raises(RemoteError) as caught:
        consumer.poll(timeout_s=1.0)
    assert caught.value.code == ResponseCode.SYSTEM_ERROR
    assert "does not support consumer to filter message by SQL92" in caught.value.remark
