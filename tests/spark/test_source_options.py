"""Issue 5, point 4 (bad options): a query with a bad option fails where it is defined, naming the option.

``spark.readStream.format("sparkmq")...load()`` asks the source for its schema, and the source
parses every option there; consumerGroup (needed by streams only) may surface at ``start()``.
"""

from __future__ import annotations

import pytest

from support.spark_harness import Collected, start_query

GOOD = {"topic": "T", "consumerGroup": "G"}


def _load(spark, options: dict[str, str], batch: bool = False):
    source = spark.read if batch else spark.readStream
    source = source.format("sparkmq")
    for key, value in options.items():
        source = source.option(key, value)
    return source.load()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        pytest.param({**GOOD, "startingOffset": "earliest"}, "startingoffset", id="unknown option (a typo)"),
        pytest.param({**GOOD, "namesrvAddr": None}, "namesrvAddr", id="missing namesrvAddr"),
        pytest.param({**GOOD, "topicPattern": "T.*"}, "topicPattern", id="topic and topicPattern"),
        pytest.param(
            {"consumerGroup": "G", "topicPattern": "T.*", "assign": '{"T": [0]}'},
            "assign",
            id="topicPattern and assign",
        ),
        pytest.param({"consumerGroup": "G"}, "topic", id="none of topic, topicPattern, assign"),
        pytest.param({**GOOD, "startingOffsets": "middle"}, "startingOffsets", id="bad startingOffsets"),
        pytest.param({**GOOD, "startingOffsets": '{"T": {"0": -3}}'}, "startingOffsets", id="startingOffsets JSON -3"),
        pytest.param(
            {**GOOD, "maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger", id="non-numeric maxOffsetsPerTrigger"
        ),
        pytest.param({**GOOD, "failOnDataLoss": "maybe"}, "failOnDataLoss", id="failOnDataLoss not a boolean"),
        pytest.param(
            {**GOOD, "sqlFilter": "a > 1", "subExpression": "TagA"}, "sqlFilter", id="sqlFilter with subExpression"
        ),
    ],
)
def test_bad_option_fails_at_definition_naming_it(spark, cluster, options, named) -> None:
    given = {"namesrvAddr": cluster.ns, **options}
    given = {k: v for k, v in given.items() if v is not None}
    with pytest.raises(Exception) as failure:
        _load(spark, given)
    assert named.lower() in str(failure.value).lower(), str(failure.value)[-2000:]


def _stream_failure(spark, options: dict[str, str], checkpoint: str) -> str:
    """Options the source can only judge once it knows the query is a stream: the query fails at start."""
    query = None
    try:
        with pytest.raises(Exception) as failure:
            query = start_query(_load(spark, options), checkpoint, Collected(), available_now=True)
            query.awaitTermination(60)
    finally:
        if query is not None:
            query.stop()
    return str(failure.value)


def test_ending_offsets_on_a_stream_and_latest_start_of_a_batch_are_rejected(spark, cluster, names) -> None:
    message = _stream_failure(spark, {"namesrvAddr": cluster.ns, **GOOD, "endingOffsets": "latest"}, names.checkpoint())
    assert "endingoffsets" in message.lower(), message[-2000:]
    with pytest.raises(Exception) as batch_failure:
        _load(spark, {"namesrvAddr": cluster.ns, "topic": "T", "startingOffsets": "latest"}, batch=True).collect()
    assert "startingoffsets" in str(batch_failure.value).lower()


def test_missing_consumer_group_fails_a_stream_by_start_at_the_latest(spark, cluster, names) -> None:
    topic = cluster.topic(queues=1)
    message = _stream_failure(spark, {"namesrvAddr": cluster.ns, "topic": topic}, names.checkpoint())
    assert "consumergroup" in message.lower(), message[-2000:]
