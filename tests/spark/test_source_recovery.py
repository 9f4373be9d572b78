"""Issue 5, point 2: a query stopped (or its driver killed) mid-stream resumes from its checkpoint
with no loss and no duplicates.

* In this process: a rate-limited query is stopped after a few batches and restarted on the same
  checkpoint (with more messages sent in between); foreachBatch keeps each run's rows by batchId.
* A real crash: the query runs in a subprocess driver (tests/spark/stream_driver.py, its own
  SparkSession) writing each batch to a file named by batchId; the whole driver process group
  (Python driver, JVM, Python workers) gets SIGKILL mid-stream; another driver (this test's
  session) takes the same checkpoint over and finishes with Trigger.AvailableNow. The union of the
  files holds every message once, and a replayed batch rewrote exactly the rows it had written.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from chispa import assert_df_equality

from sparkmq.client import Message
from support.spark_harness import (
    BatchFiles,
    Collected,
    kill_group,
    reader,
    run_available_now,
    start_driver,
    start_query,
    wait_until,
)

QUEUES = 4
DRIVER = Path(__file__).with_name("stream_driver.py")


def assert_exactly_once(spark, positions: list[tuple[int, int]], per_queue: dict[int, int]) -> None:
    schema = "queueId int, queueOffset long"
    expected = sorted((q, o) for q, n in per_queue.items() for o in range(n))
    assert_df_equality(spark.createDataFrame(sorted(positions), schema), spark.createDataFrame(expected, schema))


def test_stop_and_restart_from_checkpoint_loses_and_repeats_nothing(spark, cluster, names) -> None:
    topic = cluster.topic(QUEUES)
    cluster.send([Message(topic, f"first-{i}".encode()) for i in range(80)])
    df = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest", maxOffsetsPerTrigger=8
    ).load()
    first = Collected()
    query = start_query(df, names.checkpoint(), first)
    try:
        wait_until(lambda: len(first.batches) >= 3, 90, "three batches", query)
    finally:
        query.stop()
    assert 0 < first.count() < 80, "the first run must stop mid-stream"

    cluster.send([Message(topic, f"second-{i}".encode()) for i in range(20)])
    # A restart may change the limit: a replayed batch keeps the range in the checkpoint's offset log.
    restarted = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest", maxOffsetsPerTrigger=40
    ).load()
    second, _ = run_available_now(restarted, names.checkpoint())

    # A batch id seen by both runs was replayed: it must hold the very same rows.
    for batch_id in set(first.batches) & set(second.batches):
        assert sorted(first.batches[batch_id]) == sorted(second.batches[batch_id]), batch_id
    assert min(second.batches) <= max(first.batches) + 1
    union = {**first.batches, **second.batches}
    positions = [(r.queueId, r.queueOffset) for rows in union.values() for r in rows]
    assert_exactly_once(spark, positions, {q: 25 for q in range(QUEUES)})
    bodies = sorted(r.body.decode() for rows in union.values() for r in rows)
    assert bodies == sorted([f"first-{i}" for i in range(80)] + [f"second-{i}" for i in range(20)])
    assert cluster.committed_all(names.group, topic, QUEUES) == {q: 25 for q in range(QUEUES)}


def test_sigkill_of_the_driver_mid_stream_then_restart(spark, cluster, names, tmp_path) -> None:
    topic = cluster.topic(QUEUES)
    sent = [bytes([0xFF, i % 256]) + f"-{i}".encode() for i in range(60)]
    cluster.send([Message(topic, body) for body in sent])
    out, checkpoint, log = tmp_path / "out", tmp_path / "ck", tmp_path / "driver.log"
    began = time.monotonic()
    driver = start_driver(
        DRIVER,
        [
            "--namesrv",
            cluster.ns,
            "--topic",
            topic,
            "--group",
            names.group,
            "--checkpoint",
            str(checkpoint),
            "--out",
            str(out),
            "--max-per-trigger",
            "4",
            "--pause",
            "0.4",
        ],
        log,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("batch-*.json"))) < 3:
            assert driver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the driver wrote no 3 batches\n" + log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        kill_group(driver)
    assert driver.returncode == -signal.SIGKILL
    killed_at = time.monotonic()
    written_before = {p.name: p.read_text() for p in out.glob("batch-*.json")}
    assert sum(len(json.loads(text)) for text in written_before.values()) < 60, "the kill must land mid-stream"

    # Another driver (this process's session) takes over the checkpoint, writing the same way.
    reports: list[str] = []
    files = BatchFiles(out, reports.append)
    df = reader(
        spark, cluster, topic=topic, consumerGroup=names.group, startingOffsets="earliest", maxOffsetsPerTrigger=30
    ).load()
    query = (
        df.writeStream.foreachBatch(files)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the restarted query did not finish"
    finally:
        query.stop()
    assert not any("DIFFERENT" in line for line in reports), reports
    print(f"killed after {killed_at - began:.1f} s; restart took {time.monotonic() - killed_at:.1f} s")
    print("restarted driver:", *reports, sep="\n  ")

    rows = files.rows()
    assert_exactly_once(spark, [(q, o) for q, o, _ in rows], {q: 15 for q in range(QUEUES)})
    assert sorted(body for _, _, body in rows) == sorted(sent)
    # Files the killed driver finished were either kept or rewritten identically by a replay.
    for name, text in written_before.items():
        assert (out / name).read_text() == text, name
    assert cluster.committed_all(names.group, topic, QUEUES) == {q: 15 for q in range(QUEUES)}
