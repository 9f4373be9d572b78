"""Message trace across clients on a sparkmq broker: traces the official Java client (4.9.7, ``enableMsgTrace``)
writes are read by ``sparkmq admin queryMsgTraceById``, and traces sparkmq clients write are read by RocketMQ's
own mqadmin ``queryMsgTraceById``."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkmq.cli.main import main
from sparkmq.client import ConsumeResult, Message, ReceivedMessage
from support.client_harness import Clients, create_topic, wait_for, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess
from support.rocketmq_java import (
    MAKE_TARGET,
    RUNNER_TIMEOUT_S,
    Record,
    classpath,
    client_jvm,
    fail_or_skip,
    mqadmin,
    require_references,
)

pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class Cluster:
    ns: str
    broker: str
    topic: str
    root: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    refs = require_references("rocketmq", "runner")
    if not (refs / "runner" / "classes" / "TraceRunner.class").exists():
        fail_or_skip(f"the compiled runner has no TraceRunner: run `{MAKE_TARGET}` (it recompiles the runner)")
    root = tmp_path_factory.mktemp("trace-interop")
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(root / "store", namesrv.address, "--set", "traceTopicEnable=true") as broker,
    ):
        topic = f"T_{uuid.uuid4().hex[:8]}"
        create_topic([broker.address], topic, 2)
        wait_for_route(namesrv.address, topic, {"broker-a"})
        yield Cluster(namesrv.address, broker.address, topic, root)


def java_traced_send_and_consume(cluster: Cluster) -> Record:
    """TraceRunner: a Java producer and push consumer with enableMsgTrace, one message."""
    log_dir = cluster.root / "java"
    log_dir.mkdir(exist_ok=True)
    args = [*client_jvm(log_dir), "-cp", classpath("runner", "rocketmq"), "TraceRunner", cluster.ns, cluster.topic, "J"]
    done = subprocess.run(["java", *args], capture_output=True, text=True, timeout=RUNNER_TIMEOUT_S, cwd=log_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    record: Record = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    return record


def sparkmq_admin(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["admin", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines() if line.strip()]


def test_traces_cross_between_the_java_client_and_sparkmq(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    clients = Clients()
    try:
        got: list[str] = []

        def consume(message: ReceivedMessage) -> ConsumeResult:
            got.append(message.msg_id)
            return ConsumeResult.SUCCESS

        clients.push("CID_py_trace", cluster.ns, cluster.topic, consume, enable_msg_trace=True)
        ours = clients.producer("PID_py_trace", cluster.ns, enable_msg_trace=True).send(
            Message(cluster.topic, b"py-traced", keys=["py-key"])
        )
        wait_for(lambda: ours.msg_id in got, 30, "the sparkmq message consumed")
        with ThreadPoolExecutor(1) as pool:
            java = pool.submit(java_traced_send_and_consume, cluster)

            def sub_traced() -> bool:
                out = sparkmq_admin(capsys, "queryMsgTraceById", "-n", cluster.ns, "-i", ours.msg_id)
                return any(row[:2] == ["Sub", "CID_py_trace"] for row in rows(out))

            wait_for(sub_traced, 30, "the sparkmq consumer's trace")
            theirs = java.result()
    finally:
        clients.close_all()
    assert theirs["consumed"] is True and theirs["traced"] is True

    # RocketMQ's mqadmin reads the traces sparkmq clients wrote
    (record,) = mqadmin(cluster.ns, cluster.root / "mqadmin", [f"queryMsgTraceById -i {ours.msg_id}"])
    assert record.get("error") is None, record
    java_rows = rows(record["output"])
    assert java_rows[0] == ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"]
    assert java_rows[1][:2] == ["Pub", "PID_py_trace"] and java_rows[1][-1] == "success"
    assert ["Sub", "CID_py_trace"] in [row[:2] for row in java_rows]

    # sparkmq admin reads the traces the Java client wrote
    out = rows(sparkmq_admin(capsys, "queryMsgTraceById", "-n", cluster.ns, "-i", theirs["msgId"]))
    assert out[1][:2] == ["Pub", theirs["producerGroup"]] and out[1][-1] == "success"
    assert ["Sub", theirs["consumerGroup"]] in [row[:2] for row in out]
    assert not any(row[0] == "#Damaged" for row in out)
