"""Two broker groups (a SYNC_MASTER and its slave each) and two NameServers, all real processes on
loopback, started from the broker.conf files docs/cluster.md shows (deploy/2m-2s-sync, ports and store
directories overridden on the command line, replication intervals shortened).

The sparkmq producer and the real C++ producer send over both groups while a sparkmq push consumer
group reads; broker-a's master dies by SIGKILL mid-run. Every acknowledged message is consumed by
that group, by new C++ and sparkmq consumer groups and by a Spark batch query, the last three
reading broker-a's half from its slave, which runs with RocketMQ's defaults (no ``slaveReadEnable``).
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from sparkmq.cli.main import main
from sparkmq.client import ConsumeResult, Message, Producer, PushConsumer, ReceivedMessage, SendStatus
from sparkmq.errors import SparkmqError
from support.client_harness import wait_for_route
from support.ha_checks import FAST_HA, UNTIL_S, known_topics, wait_for_sync_link
from support.processes import REPO_ROOT, BrokerProcess, NamesrvProcess, wait_until
from support.rocketmq_cpp import CppClientRun

DEPLOY = REPO_ROOT / "deploy" / "2m-2s-sync"
GROUPS = {"broker-a": ("broker-a.conf", "broker-a-s.conf"), "broker-b": ("broker-b.conf", "broker-b-s.conf")}
TOPIC, PER_PRODUCER = "orders", 300
CREATE_TOPIC = ("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4")  # as docs/cluster.md does
CLIENT_TIMEOUT_S = 90.0


def start_brokers(stack: ExitStack, root: Path, namesrvs: str) -> dict[str, BrokerProcess]:
    """The four brokers by conf file name, started together (each stopped by ``stack``)."""
    confs = [conf for pair in GROUPS.values() for conf in pair]

    def start(conf: str) -> BrokerProcess:
        broker = BrokerProcess.start(root / conf.removesuffix(".conf"), namesrvs, "-c", str(DEPLOY / conf), *FAST_HA)
        stack.callback(broker.stop)
        return broker

    with ThreadPoolExecutor(len(confs)) as pool:
        return dict(zip(confs, pool.map(start, confs), strict=True))


def cpp_client(stack: ExitStack, root: Path, command: str, group: str, namesrvs: str, *extra: str) -> CppClientRun:
    """A C++ client run (killed by ``stack`` if still running): ``cpp-body-<i>`` sends, or a consumer."""
    options = ("--prefix", "cpp", "--keep-going") if command == "produce" else ("--deadline", "150")
    run = CppClientRun.start(
        root / "home", command, "--namesrv", namesrvs, "--topic", TOPIC, "--group", group, *options, *extra
    )
    stack.callback(run.kill)
    return run


def bodies(run: CppClientRun) -> set[str]:
    return {record["body"] for record in run.events("received")}


class PythonSends(threading.Thread):
    """The sparkmq producer sending ``py-<i>`` bodies; ``acknowledged`` holds the SEND_OK ones."""

    def __init__(self, namesrvs: str) -> None:
        super().__init__(daemon=True)
        self.namesrvs = namesrvs
        self.acknowledged: list[str] = []
        self.failures: list[str] = []
        self.attempts = 0

    def run(self) -> None:
        with Producer("PID_E2E_PY", self.namesrvs) as producer:
            for i in range(PER_PRODUCER):
                body = f"py-{i}"
                try:
                    if producer.send(Message(TOPIC, body.encode())).status is SendStatus.SEND_OK:
                        self.acknowledged.append(body)
                except SparkmqError as exc:  # not acknowledged: it may or may not be stored
                    self.failures.append(f"{body}: {exc}")
                self.attempts = i + 1


class Received:
    """The push consumer group's listener: every body seen, and the broker groups each prefix came from."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: set[str] = set()
        self.groups: dict[str, set[str]] = {}

    def __call__(self, message: ReceivedMessage) -> ConsumeResult:
        body = message.body.decode()
        with self.lock:
            self.bodies.add(body)
            self.groups.setdefault(body.split("-", 1)[0], set()).add(message.queue.broker_name)
        return ConsumeResult.SUCCESS

    def has(self, expected: set[str]) -> bool:
        with self.lock:
            return expected <= self.bodies


def push_group(stack: ExitStack, group: str, namesrvs: str) -> Received:
    """A started sparkmq push consumer of ``group`` (closed by ``stack``); what it receives."""
    received = Received()
    consumer = PushConsumer(group, namesrvs)
    consumer.subscribe(TOPIC, "*", received)
    consumer.start()
    stack.callback(consumer.close)
    return received


def test_a_master_killed_mid_run_loses_nothing_acknowledged(tmp_path: Path, spark) -> None:
    with ExitStack() as stack:
        namesrvs = ";".join(stack.enter_context(NamesrvProcess.start()).address for _ in range(2))
        brokers = start_brokers(stack, tmp_path, namesrvs)
        master_a, slave_a = (brokers[conf] for conf in GROUPS["broker-a"])
        master_b = brokers[GROUPS["broker-b"][0]]
        for master in (master_a, master_b):
            wait_for_sync_link(master.address)
        assert main(["admin", *CREATE_TOPIC, "-n", namesrvs]) == 0
        for namesrv in namesrvs.split(";"):
            wait_for_route(namesrv, TOPIC, set(GROUPS), UNTIL_S)
        for conf in (GROUPS["broker-a"][1], GROUPS["broker-b"][1]):
            assert wait_until(lambda conf=conf: TOPIC in known_topics(brokers[conf].address), UNTIL_S)

        received = push_group(stack, "CID_E2E", namesrvs)
        cpp = cpp_client(stack, tmp_path, "produce", "PID_E2E_CPP", namesrvs, "--count", str(PER_PRODUCER))
        python = PythonSends(namesrvs)
        python.start()

        early = PER_PRODUCER // 6
        cpp.wait_for(lambda run: len(run.events("sent")) >= early, CLIENT_TIMEOUT_S, f"{early} C++ sends")
        assert wait_until(lambda: len(python.acknowledged) >= early, CLIENT_TIMEOUT_S)
        master_a.kill()
        at_kill = {"cpp": len(cpp.events("sent")) + len(cpp.events("failed")), "py": python.attempts}
        assert max(at_kill.values()) < PER_PRODUCER, at_kill  # both were still sending

        cpp.finish(CLIENT_TIMEOUT_S)
        python.join(CLIENT_TIMEOUT_S)
        assert not python.is_alive()
        cpp_acknowledged = {f"cpp-body-{r['index']}" for r in cpp.events("sent") if r["status"] == 0}
        acknowledged = cpp_acknowledged | set(python.acknowledged)
        assert len(cpp.events("sent")) + len(cpp.events("failed")) == python.attempts == PER_PRODUCER

        assert wait_until(lambda: received.has(acknowledged), CLIENT_TIMEOUT_S), (
            f"the push consumer group missed {sorted(acknowledged - received.bodies)[:20]}"
        )
        assert received.groups["cpp"] == received.groups["py"] == set(GROUPS)  # both producers used both groups

        # New groups, C++ and sparkmq, read broker-a's half from its slave alone.
        late = push_group(stack, "CID_E2E_LATE", namesrvs)
        reader = cpp_client(stack, tmp_path, "push-consume", "CID_E2E_CPP", namesrvs, "--until-stdin")
        spark_bodies = {
            bytes(row.body).decode()
            for row in spark.read.format("sparkmq")
            .option("namesrvAddr", namesrvs)
            .option("topic", TOPIC)
            .load()
            .select("body")
            .collect()
        }
        reader.wait_for(lambda run: acknowledged <= bodies(run), CLIENT_TIMEOUT_S, "the C++ group to read them all")
        assert wait_until(lambda: late.has(acknowledged), CLIENT_TIMEOUT_S), "the new sparkmq group missed some"
        reader.request_stop()
        reader.finish(CLIENT_TIMEOUT_S)
    assert acknowledged <= spark_bodies, sorted(acknowledged - spark_bodies)[:20]
    assert acknowledged <= spark_bodies, sorted(acknowledged - spark_bodies)[:20]


def test_the_cluster_guide_shows_the_deploy_files_and_their_commands() -> None:
    """docs/cluster.md quotes a conf file verbatim, starts exactly the files the test above runs and
    creates its topic alike."""
    guide = (REPO_ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    assert (DEPLOY / "broker-a.conf").read_text(encoding="utf-8") in guide
    assert "sparkmq admin " + " ".join(CREATE_TOPIC) in guide
    started = re.findall(r"sparkmq broker -c deploy/2m-2s-sync/(\S+)", guide)
    assert sorted(started) == sorted(conf for confs in GROUPS.values() for conf in confs)
    assert sorted(path.name for path in DEPLOY.iterdir()) == sorted(started)
