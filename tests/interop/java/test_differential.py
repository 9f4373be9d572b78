"""The same scripted scenarios, through the official Java client 4.9.7, against Apache RocketMQ 4.9.7 and sparkmq.

Each scenario (references/runner/ScenarioRunner.java) records send statuses, queue offsets, pull statuses,
next offsets, bodies, properties, response codes and remarks; the two runs must match once the differences
docs/compatibility.md lists are taken out. The client runs with its default ``vipChannelEnabled``, so
every request it sends to listenPort - 2 is served by the broker's VIP channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq.client import AsyncPullConsumer
from support.reference_pair import SIDES, BrokerPair, broker_pair, comparable
from support.rocketmq_cpp import CppClientRun
from support.rocketmq_java import Record

SCENARIOS = ("tags", "batch", "sql92", "orderly", "delayed", "retry_dlq", "transaction", "offsets", "query")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerPair]:
    with broker_pair(tmp_path_factory.mktemp("differential")) as started:
        yield started


@pytest.fixture(scope="module")
def runs(pair: BrokerPair) -> dict[str, dict[str, list[Record]]]:
    return pair.run("Diff", SCENARIOS)


def _both(runs: dict[str, dict[str, list[Record]]], scenario: str) -> tuple[list[Record], list[Record]]:
    apache, ours = (runs[side].get(scenario, []) for side in SIDES)
    assert apache and apache[-1]["event"] == "done", f"Apache run of {scenario} did not finish: {apache[-3:]}"
    assert ours and ours[-1]["event"] == "done", f"sparkmq run of {scenario} did not finish: {ours[-3:]}"
    return apache, ours


def _assert_same(apache: list[Record], ours: list[Record]) -> None:
    for expected, got in zip(comparable(apache), comparable(ours), strict=False):
        assert got == expected
    assert len(ours) == len(apache)


@pytest.mark.parametrize("scenario", ["tags", "batch", "orderly", "delayed", "retry_dlq", "transaction", "query"])
def test_the_java_client_sees_the_same_on_both_brokers(runs: dict[str, dict[str, list[Record]]], scenario: str) -> None:
    _assert_same(*_both(runs, scenario))


def test_offsets_match_but_for_two_documented_differences(runs: dict[str, dict[str, list[Record]]]) -> None:
    apache, ours = _both(runs, "offsets")
    apache_bounds, our_bounds = (next(r for r in records if r["event"] == "bounds") for records in (apache, ours))
    # searchOffset past the last message: 4.9.7 answers the last message, sparkmq the max offset.
    assert (apache_bounds.pop("searchFuture"), our_bounds.pop("searchFuture")) == (
        apache_bounds["max"] - 1,
        our_bounds["max"],
    )
    # A reset with no consumer online: 4.9.7 refuses (CONSUMER_NOT_ONLINE, mqadmin then resets offset by
    # offset), sparkmq resets the committed offsets itself.
    apache_reset, our_reset = apache[-2], ours[-2]
    assert (apache_reset["event"], apache_reset["code"]) == ("failed", 206)
    assert our_reset == {"scenario": "offsets", "event": "reset", "offset": 0}
    _assert_same(apache[:-2], ours[:-2])


def test_pull_past_the_end_resumes_at_the_max_offset(runs: dict[str, dict[str, list[Record]]]) -> None:
    for records in _both(runs, "tags"):
        past = next(r for r in records if r.get("expr") == "past end")
        assert (past["status"], past["next"], past["max"]) == ("OFFSET_ILLEGAL", 6, 6)


def test_sql92_filters_match_but_an_expression_that_does_not_parse(runs: dict[str, dict[str, list[Record]]]) -> None:
    apache, ours = _both(runs, "sql92")
    for records in (apache, ours):
        bodies = {r["expr"]: [m["body"] for m in r.get("msgs", [])] for r in records if r["event"] == "pulled"}
        assert bodies["a BETWEEN 3 AND 6"] == ["sql-3", "sql-4", "sql-5", "sql-6"]
        assert bodies["s = 'high' AND TAGS = 'odd'"] == ["sql-5", "sql-7", "sql-9"]
    # "a >": 4.9.7 logs the parse error and delivers every message; sparkmq answers
    # SUBSCRIPTION_PARSE_FAILED (23) with the parser's message.
    apache_bad, our_bad = (next(r for r in rs if "a >" in (r.get("expr"), r.get("what"))) for rs in (apache, ours))
    assert (apache_bad["event"], apache_bad["status"], len(apache_bad["msgs"])) == ("pulled", "FOUND", 10)
    assert (our_bad["event"], our_bad["class"], our_bad["code"]) == ("failed", "MQBrokerException", 23)
    _assert_same([r for r in apache if r is not apache_bad], [r for r in ours if r is not our_bad])


def test_a_cpp_client_batch_is_one_message_on_apache_and_its_messages_on_sparkmq(
    pair: BrokerPair, tmp_path: Path
) -> None:
    """The C++ client sends a batch as SEND_MESSAGE with ``batch=1``: 4.9.7 reads "1" as false (Java's
    ``Boolean.parseBoolean``) and stores the batch's encoding as one message; sparkmq stores its messages."""
    stored = {}
    for side in SIDES:
        run = CppClientRun.start(
            tmp_path / side,
            "produce-batch",
            "--namesrv",
            pair.namesrvs[side],
            "--topic",
            "CppBatchDiff",
            "--group",
            "cpp_batch_pg",
            "--batches",
            "3",
            "--size",
            "4",
        )
        sent = [r for r in run.finish(timeout_s=90) if r["event"] == "sent"]
        assert [r["status"] for r in sent] == [0, 0, 0]
        stored[side] = asyncio.run(messages_in(pair.namesrvs[side], "CppBatchDiff"))
    assert stored == {"apache": 3, "sparkmq": 12}


async def messages_in(namesrv: str, topic: str) -> int:
    """The sum of ``topic``'s max offsets, read through sparkmq's pull consumer."""
    async with AsyncPullConsumer("cpp_batch_count", namesrv) as consumer:
        return sum([await consumer.max_offset(queue) for queue in await consumer.queues_of(topic)])
