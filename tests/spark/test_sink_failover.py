"""A streaming write of the sparkmq sink through a controller failover, as real processes.

Three brokers of one group in controller mode (SYNC_MASTER, ``allAckInSyncStateSet=true``) and
three controller nodes (Raft); a file-fed query writes with ``format("sparkmq")``, and once two
micro-batches are committed and the third is being stored, the broker master and the controller
leader are SIGKILLed together: the remaining controllers elect a leader first, then a broker
master (one to three seconds). The query carries on by itself, and every row of every committed
micro-batch is then read from the new master:

* at-least-once (the default): the sink's sends to the group's queues fail meanwhile and the
  producer tries them again with a fresh route (``sendRetryTimeout``), so no task fails. None is
  lost; a run whose acknowledgement the kill swallowed (stored and replicated, the answer never
  read) is sent again, so such a row may be there twice.
* exactly-once: a half message is never sent twice, so the task writing at the kill fails and
  Spark's retry sends its rows under a new token; the driver's commit marker is tried again until
  the new master stores it. ENDs that reach no master are left to the new master's check-back
  (every second here), which answers from the markers. Every row is there exactly once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sparkmq import Message, Producer, PullConsumer
from sparkmq.client.message import decode_pull_body
from support.controller_group import GROUP, UNTIL_S, ControllerGroup
from support.processes import wait_until as wait_for
from support.spark_harness import Names, wait_until

FILES, ROWS_PER_FILE = 6, 20_000
TX_SETTINGS = ("--set", "transactionCheckInterval=1000", "--set", "transactionTimeOut=3000")


def committed_batches(checkpoint: Path) -> int:
    """Micro-batches the query committed (Spark's ``commits/<batchId>`` files)."""
    commits = checkpoint / "commits"
    return sum(1 for f in commits.iterdir() if f.name.isdigit()) if commits.is_dir() else 0


def failed_tasks(spark: SparkSession, query: StreamingQuery) -> int:
    """Failed task attempts of the query's jobs (Spark runs them in the job group of the query's run id)."""
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job in tracker.getJobIdsForGroup(str(query.runId)):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else []:
            stage_info = tracker.getStageInfo(stage)
            failed += stage_info.numFailedTasks if stage_info is not None else 0
    return failed


def stored_count(namesrv: str, topic: str) -> int:
    """Messages the topic's queues hold (their max offsets' sum)."""
    with PullConsumer(f"CID_count_{topic}", namesrv, auto_commit_interval_s=None) as consumer:
        return sum(consumer.max_offset(queue) for queue in consumer.queues_of(topic))


def stored_bodies(namesrv: str, topic: str) -> Counter[bytes]:
    """Every stored message body of ``topic``, counted, pulled queue by queue from the queue's minimum."""
    bodies: Counter[bytes] = Counter()
    with PullConsumer(f"CID_check_{topic}", namesrv, auto_commit_interval_s=None) as consumer:
        for queue in consumer.queues_of(topic):
            offset, end = consumer.min_offset(queue), consumer.max_offset(queue)
            while offset < end:
                result = consumer.pull_raw(queue, offset, 1024)
                assert result.found, (queue, offset, result.status)
                bodies.update(m.body for m in decode_pull_body(result.body, GROUP))
                offset = result.next_begin_offset
    return bodies


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_streaming_write_carries_on_to_the_new_master_and_loses_no_committed_row(
    spark, names: Names, tmp_path: Path, guarantee: str
) -> None:
    topic, inbox, checkpoint = f"CtlSink_{names.tag}", tmp_path / "inbox", Path(names.checkpoint())
    inbox.mkdir()
    rows = [f"f{f}-r{r}" for f in range(FILES) for r in range(ROWS_PER_FILE)]
    for f in range(FILES):
        (inbox / f"part-{f:03d}.txt").write_text("".join(f"f{f}-r{r}\n" for r in range(ROWS_PER_FILE)))
    exactly_once = guarantee == "exactly-once"
    with ControllerGroup(tmp_path / "group", 3, extra=TX_SETTINGS if exactly_once else (), controllers=3) as group:
        assert group.namesrv is not None
        namesrv = group.namesrv.address
        assert wait_for(group.all_in_sync, UNTIL_S), "the group never had a master with every replica in sync"
        with Producer("PID_CTL_SINK", namesrv, send_timeout_s=5.0) as producer:
            producer.send(Message(topic, b"topic created"))  # the topic's config reaches the replicas
        assert wait_for(group.all_in_sync, UNTIL_S), "the replicas never caught up"
        assert group.nodes is not None
        assert wait_for(lambda: group.nodes.leader() is not None, UNTIL_S), "the controllers never had a leader"
        leader = group.nodes.leader()
        query = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(inbox))
            .selectExpr("value AS body")
            .writeStream.format("sparkmq")
            .option("namesrvAddr", namesrv)
            .option("topic", topic)
            .option("batchSize", 100)
            .option("deliveryGuarantee", guarantee)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:

            def third_batch_mid_way() -> bool:
                return committed_batches(checkpoint) == 2 and stored_count(namesrv, topic) > 2.2 * ROWS_PER_FILE

            wait_until(third_batch_mid_way, UNTIL_S, "the third micro-batch being stored", query)
            old = group.master_index()
            assert old is not None and leader is not None
            group.nodes.kill(leader)
            group.kill(old)
            assert wait_for(lambda: group.master_index() not in (None, old), UNTIL_S), "no master was elected"
            wait_until(lambda: committed_batches(checkpoint) == FILES, 2 * UNTIL_S, "every micro-batch", query)
            assert query.isActive and query.exception() is None
            if not exactly_once:
                assert failed_tasks(spark, query) == 0, "a task failed: the sink did not carry on by itself"
        finally:
            query.stop()
        if exactly_once:  # rows whose END reached no master become visible by the check-back
            committed = len(rows) + 1
            assert wait_for(lambda: stored_count(namesrv, topic) >= committed, 2 * UNTIL_S), "rows stay invisible"
        seen = stored_bodies(namesrv, topic)
    missing = [row for row in rows if seen[row.encode()] == 0]
    assert not missing, f"{len(missing)} committed rows are lost, e.g. {missing[:3]}"
    assert set(seen) == {row.encode() for row in rows} | {b"topic created"}
    if exactly_once:
        assert max(seen.values()) == 1, f"{sum(n > 1 for n in seen.values())} rows are there more than once"
