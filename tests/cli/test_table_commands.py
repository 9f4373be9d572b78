"""``sparkmq admin updateTopic -a`` and ``tableStatus`` against real NameServer and broker processes writing tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq.cli.main import main
from support.client_harness import wait_for_route
from support.processes import BrokerProcess, NamesrvProcess, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NamesrvProcess, BrokerProcess, Path]]:
    root = tmp_path_factory.mktemp("tables")
    settings = ("--set", f"tableTopicRoot={root}", "--set", "tableTopicCommitIntervalMs=100")
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(tmp_path_factory.mktemp("store"), namesrv.address, *settings) as broker,
    ):
        yield namesrv, broker, root


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["admin", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_update_topic_attributes_then_table_status(cluster, capsys) -> None:
    namesrv, broker, root = cluster
    topic = f"T_{uuid.uuid4().hex[:8]}"
    code, out, err = run(
        capsys, "updateTopic", "-n", namesrv.address, "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2",
        "-a", "+table.enable=true,+table.partitionBy=date(storeTimestamp)",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[-1].endswith(
        "order=false, attributes={table.enable=true, table.partitionBy=date(storeTimestamp)}]"
    )
    wait_for_route(namesrv.address, topic, {"broker-a"})
    for body in ("a", "b", "c"):
        assert run(capsys, "sendMessage", "-n", namesrv.address, "-t", topic, "-p", body)[0] == 0

    def lines() -> list[str]:
        code, out, err = run(capsys, "tableStatus", "-n", namesrv.address, "-t", topic)
        assert code == 0, err
        return out.splitlines()

    def caught_up() -> bool:
        found = lines()
        queues = [line.split() for line in found[2:]]
        return "state ok" in found[0] and sum(int(q[3]) for q in queues) == 3 and all(q[4] == "0" for q in queues)

    assert wait_until(caught_up, 30)
    status = lines()
    assert status[0].split()[:3] == ["broker-a", "table", str(root / topic)]
    assert status[1].split()[:3] == ["#QID", "#Table", "Offset"]


def test_bad_attributes_are_refused_with_the_reason(cluster, capsys) -> None:
    namesrv, broker, _ = cluster
    topic = f"T_{uuid.uuid4().hex[:8]}"
    code, _, err = run(
        capsys, "updateTopic", "-n", namesrv.address, "-b", broker.address, "-t", topic, "-a", "+table.format=avro"
    )
    assert code == 1 and "bad table.format value 'avro': expected raw or json" in err
    code, _, err = run(
        capsys, "updateTopic", "-n", namesrv.address, "-b", broker.address, "-t", topic, "-a", "table.enable=true"
    )
    assert code == 1 and "wrong format attribute 'table.enable=true'" in err
    code, _, err = run(capsys, "tableStatus", "-n", namesrv.address, "-t", "NoSuchTopic")
    assert code == 1 and err
