"""A producer's ``retry_timeout_s``: a send that reached no broker is tried again, with a fresh route,
until the window closes; without one, RocketMQ's attempts only.

Real NameServer and broker processes. A lone broker is SIGKILLed: a send to its queue without a
window fails at once, one with a short window fails too (the NameServer drops the topic's route:
no broker serves it, not retriable). A master with a slave is SIGKILLed: the route keeps the
group's queues, none writable, and a send with a long window is still trying when its first
failure is logged, saying when it tries again and how much of the window is left (a half message
with the same window is not: it fails), then is stored by the
master restarted on the same port and store (as a group's newly elected master takes over its
queues).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sparkmq.client import Message, MessageQueue, Producer, PullConsumer, SendStatus
from sparkmq.client.transaction_producer import LocalTransactionState, TransactionProducer
from sparkmq.errors import SparkmqError
from support.client_harness import create_topic, read_queue, wait_for, wait_for_route
from support.ha_checks import FAST_HA, UNTIL_S, route_ids
from support.processes import BrokerProcess, NamesrvProcess, wait_until

REGISTER = ("--set", "registerNameServerPeriod=1000")
BROKER = "broker-window"
HA = ("--set", f"brokerName={BROKER}", *FAST_HA)
SLAVE = ("--set", "brokerRole=SLAVE", "--set", "brokerId=1")


def commit(*_: object) -> LocalTransactionState:
    return LocalTransactionState.COMMIT


def learn_queue(producer: Producer, topic: str) -> MessageQueue:
    """A queue of ``topic``, once the producer has its route (a first send)."""
    producer.send(Message(topic, b"warm-up"))
    return producer._async.instance.routes[topic].publish_queues()[0]


def test_a_dead_broker_fails_a_send_at_once_without_a_window_and_when_the_window_closes(tmp_path: Path) -> None:
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(tmp_path / "a", namesrv.address, *REGISTER) as broker:
        topic = "RetryWindowBound"
        create_topic([broker.address], topic, 2)
        wait_for_route(namesrv.address, topic, {"broker-a"})
        with (
            Producer("PID_no_window", namesrv.address) as plain,
            Producer("PID_short_window", namesrv.address, retry_timeout_s=0.3) as short,
        ):
            queues = learn_queue(plain, topic), learn_queue(short, topic)
            broker.kill()
            for producer, queue in zip((plain, short), queues, strict=True):
                with pytest.raises(SparkmqError):
                    producer.send(Message(topic, b"lost"), queue=queue)


def test_a_send_within_its_window_is_stored_by_the_master_that_comes_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sparkmq.client.producer")
    topic = "RetryWindowCarryOn"
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(tmp_path / "slave", namesrv.address, *HA, *SLAVE):
        master = BrokerProcess.start(tmp_path / "master", namesrv.address, *HA)
        try:
            create_topic([master.address], topic, 2)
            assert wait_until(lambda: route_ids(namesrv.address, topic, BROKER) == {0, 1}, UNTIL_S)
            with Producer("PID_window", namesrv.address, retry_timeout_s=UNTIL_S) as producer:
                queue = learn_queue(producer, topic)
                port = master.port
                master.kill()  # the route keeps the slave: the group's queues are there, none writable
                assert wait_until(lambda: route_ids(namesrv.address, topic, BROKER) == {1}, UNTIL_S)
                with ThreadPoolExecutor(1) as pool:
                    sent = pool.submit(producer.send, Message(topic, b"kept"), queue=queue)
                    failed = f"send to {BROKER} failed"
                    wait_for(lambda: any(failed in r.getMessage() for r in caplog.records), UNTIL_S, "a failure")
                    assert not sent.done(), "the send gave up although its window is open"
                    logged = next(r.getMessage() for r in caplog.records if failed in r.getMessage())
                    assert "(attempt 1, retrying in 0.05 s, " in logged, logged  # a queue's one attempt, the window
                    assert " s of the retry window left)" in logged, logged
                    with (
                        TransactionProducer(
                            "PID_window_tx",
                            namesrv.address,
                            execute_local=commit,
                            check_local=commit,
                            retry_timeout_s=UNTIL_S,
                        ) as transactions,
                        pytest.raises(SparkmqError),
                    ):
                        transactions.send_in_transaction(Message(topic, b"half"))  # never tried past its attempts
                    master = BrokerProcess.start(tmp_path / "master", namesrv.address, *HA, port=port)
                    result = sent.result(UNTIL_S)
                assert result.status is SendStatus.SEND_OK and result.queue == queue
            with PullConsumer("CID_window", namesrv.address, auto_commit_interval_s=None) as pull:
                assert b"kept" in [m.body for m in read_queue(pull, queue)]
        finally:
            master.stop()
