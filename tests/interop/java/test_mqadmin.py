"""RocketMQ's own mqadmin (rocketmq-tools 4.9.7) against Apache RocketMQ 4.9.7 and sparkmq: the same commands
print the same tables, the same successes and the same failures (addresses and the FAQ line aside)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from support.reference_pair import SIDES, broker_pair
from support.rocketmq_java import Record, mqadmin

# Compared whole once addresses, timestamps and the FAQ sentence are masked.
SAME_OUTPUT = (
    "updateTopic -c DefaultCluster -t AdminTopic -r 4 -w 4",
    "topicRoute -t AdminTopic",
    "topicStatus -t AdminTopic",
    "topicClusterList -t AdminTopic",
    "updateSubGroup -c DefaultCluster -g AdminGroup",
    "consumerProgress -g AdminGroup",
    "deleteTopic -c DefaultCluster -t AdminTopic",
    "topicRoute -t AdminTopic",
)
# System topics Apache creates at start and sparkmq does not (docs/compatibility.md).
APACHE_ONLY_TOPICS = {"BenchmarkTest", "DefaultCluster_REPLY_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC"}
# Different key sets by design (docs/compatibility.md): checked for their shared keys.
BROKER_STATUS = "brokerStatus -b {broker}"
BROKER_CONFIG = "getBrokerConfig -b {broker}"
MASKS = (
    (re.compile(r"127\.0\.0\.1:\d+"), "<addr>"),
    (re.compile(r"\n(See http://rocketmq\.apache\.org/docs/faq/ for further details\.|For more information, .*)"), ""),
    (re.compile(r"^\tat .*\n", re.M), ""),
)


def _masked(text: str) -> str:
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    return text


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Record]]]:
    root = tmp_path_factory.mktemp("mqadmin")
    with broker_pair(root) as pair, ThreadPoolExecutor(2) as pool:
        commands = {
            side: [
                "clusterList",
                SAME_OUTPUT[0],
                "topicList",
                *SAME_OUTPUT[1:-2],
                BROKER_STATUS.format(broker=pair.brokers[side]),
                BROKER_CONFIG.format(broker=pair.brokers[side]),
                *SAME_OUTPUT[-2:],
            ]
            for side in SIDES
        }
        futures = {side: pool.submit(mqadmin, pair.namesrvs[side], root / side, commands[side]) for side in SIDES}
        yield {side: future.result() for side, future in futures.items()}


def _output(records: list[Record], prefix: str, nth: int = 0) -> str:
    return [r["output"] for r in records if r["command"].startswith(prefix)][nth]


@pytest.mark.parametrize("command", sorted(set(SAME_OUTPUT)))
def test_mqadmin_prints_the_same_for_both_brokers(outputs: dict[str, list[Record]], command: str) -> None:
    runs = SAME_OUTPUT.count(command)
    for nth in range(runs):
        apache, ours = (_masked(_output(outputs[side], command, nth)) for side in SIDES)
        assert ours == apache


def test_mqadmin_topiclist_differs_only_by_documented_system_topics(outputs: dict[str, list[Record]]) -> None:
    apache, ours = (set(_output(outputs[side], "topicList").split()) for side in SIDES)
    assert "AdminTopic" in ours
    assert apache - ours == APACHE_ONLY_TOPICS
    assert ours <= apache


def test_mqadmin_clusterlist_shows_the_one_broker(outputs: dict[str, list[Record]]) -> None:
    for side in SIDES:
        rows = [line.split() for line in _output(outputs[side], "clusterList").splitlines()[1:] if line.strip()]
        assert [row[:4] for row in rows] == [["DefaultCluster", "broker-a", "0", rows[0][3]]]
        assert rows[0][4].startswith("V4_9_7") or side == "sparkmq"


def test_mqadmin_broker_status_and_config_share_their_keys(outputs: dict[str, list[Record]]) -> None:
    for side in SIDES:
        status = dict(line.split(":", 1) for line in _output(outputs[side], "brokerStatus").splitlines() if ":" in line)
        assert {"brokerVersion", "msgPutTotalTodayNow", "commitLogMaxOffset"} <= {key.strip() for key in status}
        assert status["brokerVersion                   "].strip() == "407"
        config = _output(outputs[side], "getBrokerConfig")
        for key, value in (("brokerClusterName", "DefaultCluster"), ("brokerName", "broker-a"), ("brokerId", "0")):
            assert re.search(rf"^{key}\s+=\s+{value}$", config, re.M), (side, key)
