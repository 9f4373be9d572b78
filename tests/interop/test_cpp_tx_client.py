"""The real C++ client's TransactionMQProducer (PyPI rocketmq-client-python 0.5.0rc2) against sparkmq.

Commit, rollback, and UNKNOWN resolved by the broker's check-back: the C++ producer answers
CHECK_TRANSACTION_STATE with END_TRANSACTION (fromTransactionCheck) unchanged. What consumers
can read is checked with sparkmq's PullConsumer: only committed messages, each once.
The broker checks back every second about half messages older than one second.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq import PullConsumer, ReceivedMessage
from sparkmq.message import layout as L
from support.client_harness import read_queue, route_brokers, wait_for
from support.processes import BrokerProcess, NamesrvProcess
from support.rocketmq_cpp import CPP_TX_PYTHON, TX_DRIVER, CppClientRun, require_cpp_python

TX_SETTINGS = ("--set", "transactionCheckInterval=1000", "--set", "transactionTimeOut=1000")
CLIENT_TIMEOUT_S = 90.0
WAIT_S = 30.0


class TxCluster:
    def __init__(self, namesrv: NamesrvProcess, broker: BrokerProcess) -> None:
        self.namesrv, self.broker = namesrv, broker

    def readable(self, topic: str) -> list[ReceivedMessage]:
        """Everything a consumer of ``topic`` can read, every queue from offset 0."""
        if not route_brokers(self.namesrv.address, topic):
            return []
        with PullConsumer(f"CID_{uuid.uuid4().hex[:8]}", self.namesrv.address) as pull:
            return [m for q in pull.queues_of(topic) for m in read_queue(pull, q)]

    def bodies(self, topic: str) -> list[bytes]:
        return sorted(m.body for m in self.readable(topic))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxCluster]:
    require_cpp_python(CPP_TX_PYTHON)
    store = tmp_path_factory.mktemp("interop-tx-store")
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address, *TX_SETTINGS) as broker:
        yield TxCluster(namesrv, broker)


@pytest.fixture
def transact(cluster: TxCluster, tmp_path: Path) -> Iterator:
    runs: list[CppClientRun] = []

    def start(topic: str, group: str, **options: object) -> CppClientRun:
        args = ["transact", "--namesrv", cluster.namesrv.address, "--topic", topic, "--group", group]
        for name, value in options.items():
            args += ["--" + name.replace("_", "-"), str(value)]
        run = CppClientRun.start(tmp_path / "home", *args, python=CPP_TX_PYTHON, driver=TX_DRIVER)
        runs.append(run)
        return run

    logged = len(cluster.broker.output)
    try:
        yield start
    finally:
        for run in runs:
            run.kill()
        print("broker output during this test:", *cluster.broker.output[logged:][-60:], sep="\n  ")


@pytest.fixture
def topic() -> str:
    return f"InteropTx_{uuid.uuid4().hex[:10]}"


def test_commit_and_rollback(cluster: TxCluster, transact, topic: str) -> None:
    records = transact(topic, "PID_cpp_tx_ends", count=4, decide="commit,rollback").finish(CLIENT_TIMEOUT_S)
    sent = [r for r in records if r["event"] == "sent"]
    assert [r["status"] for r in sent] == [0] * 4 and [r["decision"] for r in sent] == ["commit", "rollback"] * 2
    # (Should a check-back round come before an END, the answer is what the local transaction decided.)
    wait_for(lambda: cluster.bodies(topic) == [b"tx-0-commit", b"tx-2-commit"], WAIT_S, "the two commits")
    committed = {m.body: m for m in cluster.readable(topic)}
    first = committed[b"tx-0-commit"]
    assert (first.tags, first.keys, first.properties["seq"]) == ("TagTx", ["tx-0"], "0")
    assert L.transaction_type(first.sys_flag) == L.TRANSACTION_COMMIT_TYPE
    assert first.msg_id == sent[0]["msg_id"] and "REAL_TOPIC" not in first.properties
    assert cluster.bodies(topic) == [b"tx-0-commit", b"tx-2-commit"]  # each once


def test_unknown_resolved_to_commit_by_check_back(cluster: TxCluster, transact, topic: str) -> None:
    run = transact(topic, "PID_cpp_tx_check_commit", count=2, decide="unknown", check="commit", wait_checks=2)
    run.wait_for(lambda r: len(r.events("sent")) == 2, WAIT_S, "both half messages sent")
    assert cluster.bodies(topic) == []  # undecided: nobody reads them
    records = run.finish(CLIENT_TIMEOUT_S)
    checked = [r for r in records if r["event"] == "checked"]
    assert {r["body"] for r in checked} == {"tx-0-unknown", "tx-1-unknown"}  # a slow answer may be asked twice
    assert all(r["topic"] == topic for r in checked)  # the check body carries the real topic
    wait_for(lambda: cluster.bodies(topic) == [b"tx-0-unknown", b"tx-1-unknown"], WAIT_S, "the checked commits")


def test_unknown_resolved_to_rollback_by_check_back(cluster: TxCluster, transact, topic: str) -> None:
    run = transact(
        topic, "PID_cpp_tx_check_rollback", count=2, decide="unknown,commit", check="rollback", wait_checks=1
    )
    records = run.finish(CLIENT_TIMEOUT_S)
    checked = [r for r in records if r["event"] == "checked" and r["body"] == "tx-0-unknown"]
    assert checked and all(r["answer"] == "rollback" for r in checked)
    wait_for(lambda: cluster.bodies(topic) == [b"tx-1-commit"], WAIT_S, "the committed one")
    # The rolled-back message is not readable, now or in any later check round of a live producer.
    marker = transact(
        topic, "PID_cpp_tx_check_rollback", count=1, decide="unknown", check="commit", wait_checks=1, prefix="marker"
    ).finish(CLIENT_TIMEOUT_S)
    assert {r["body"] for r in marker if r["event"] == "checked"} == {"marker-0-unknown"}
    wait_for(lambda: b"marker-0-unknown" in cluster.bodies(topic), WAIT_S, "the marker's commit")
    assert cluster.bodies(topic) == [b"marker-0-unknown", b"tx-1-commit"]
