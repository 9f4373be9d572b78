"""Slave reads with the master killed, through the official Java client 4.9.7, on Apache RocketMQ 4.9.7 and sparkmq.

Per side a NameServer, a SYNC_MASTER and its SLAVE with RocketMQ's default read settings (no
``slaveReadEnable``). ScenarioRunner's ``slave_fill`` sends 40 messages (tags, keys) to two queues and commits
an offset to the master, waiting until the slave's table sync has copied the topic and that offset; both
masters are then SIGKILLed and ``slave_read`` pulls from the slave, reads and commits offsets there, and
records what a send gets with no master. The two runs must match once the documented differences
(docs/compatibility.md) are taken out.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.reference_pair import SIDES, ReplicatedPair, comparable, replicated_pair
from support.rocketmq_java import Record

PREFIX = "Slave"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Record]]]:
    pair: ReplicatedPair
    with replicated_pair(tmp_path_factory.mktemp("slave-reads")) as pair:
        filled = pair.run(PREFIX, ["slave_fill"])
        pair.kill_masters()
        read = pair.run(PREFIX, ["slave_read"])
        yield {side: filled[side]["slave_fill"] + read[side]["slave_read"] for side in SIDES}


def _events(records: list[Record], event: str) -> list[Record]:
    return [r for r in records if r["event"] == event]


def test_both_runs_finish_with_every_send_acknowledged_by_the_slave(runs: dict[str, list[Record]]) -> None:
    for side in SIDES:
        records = runs[side]
        finished = [r["event"] for r in records if r["event"] in ("done", "error")]
        # "no scenario slave_fill": a runner compiled before these scenarios (`make references` compiles it again)
        assert finished == ["done", "done"], (side, records[-3:])
        sent = _events(records, "sent")
        assert [r["status"] for r in sent] == ["SEND_OK"] * 40, side
        assert sorted((r["queue"], r["offset"]) for r in sent) == [(q, o) for q in (0, 1) for o in range(20)]


def test_the_java_client_sees_the_same_from_the_slave_on_both_brokers(runs: dict[str, list[Record]]) -> None:
    apache, ours = (comparable(runs[side]) for side in SIDES)
    # A send straight to the slave: SERVICE_NOT_AVAILABLE (14) on both; 4.9.7's remark lists every reason a
    # store refuses puts (with its disk ratios), sparkmq's names the one that applies.
    apache_send, our_send = (
        next(r for r in rs if r["event"] == "slave answers" and r["what"] == "send") for rs in (apache, ours)
    )
    assert (apache_send["code"], our_send["code"]) == (14, 14)
    assert apache_send["remark"].startswith("service not available now.")
    assert "messages are put to the slave" in apache_send["remark"]
    assert our_send["remark"] == "message store is slave mode, so putMessage is forbidden"
    apache_send["remark"] = our_send["remark"]
    for expected, got in zip(apache, ours, strict=False):
        assert got == expected
    assert len(ours) == len(apache)


@pytest.mark.parametrize("side", SIDES)
def test_the_slave_serves_reads_and_offsets_and_refuses_sends(runs: dict[str, list[Record]], side: str) -> None:
    """What each broker answers, spelled out: a SLAVE with the default settings serves pulls (suggesting the
    master), keeps offsets committed to it, and a client with no master in the route cannot send."""
    records = runs[side]
    assert _events(records, "route")[0]["ids"] == [1]
    assert _events(records, "read from")[0] == {
        "scenario": "slave_read",
        "event": "read from",
        "slave": True,
        "address is the slave's": True,
    }
    pulls = {r["expr"]: r for r in _events(records, "pulled")}
    assert [m["body"] for m in pulls["*"]["msgs"]] == [f"slave-{i}" for i in range(0, 40, 2)]
    assert [m["tags"] for m in pulls["A || C"]["msgs"]] == ["A", "C"] * 6 + ["A"]
    assert (pulls["at end"]["status"], pulls["at end"]["next"]) == ("NO_NEW_MSG", 20)
    # a slave does not correct an offset past the end: PULL_RETRY_IMMEDIATELY, the requested offset kept
    assert (pulls["past end"]["status"], pulls["past end"]["next"]) == ("NO_MATCHED_MSG", 100)
    assert {r["brokerId"] for r in _events(records, "suggested")} == {0}
    assert _events(records, "synced offset")[0]["offset"] == 5
    assert [r["offset"] for r in _events(records, "committed")] == [12, 12]
    failures = {r["what"]: (r["class"], r["code"]) for r in _events(records, "failed")}
    assert failures == {
        "max offset": ("MQClientException", -1),
        "send": ("MQClientException", 10005),
        "send to a queue": ("MQClientException", -1),
    }
