"""Issue 9, source speed: what ``import sparkmq.source`` costs Spark's per-query source runner.

Spark starts a fresh Python process per streaming query for a Python source's driver side
(``pyspark.sql.streaming.python_streaming_source_runner``), so every module the source imports is
paid again by each query before its first batch. The driver side never decodes records nor serves
admin requests: the record codecs (``connector.arrow``, ``message.bulk`` and ``message.record``), the
Arrow compute kernels, the consumer running-info codecs and the admin bodies stay unloaded until
something needs them; so does msgspec, whose header decode pays for its import only after ~1,000
headers (``protocol.command.FAST_PATH_AFTER_HEADERS``). It asks routes and offsets over blocking sockets
(``connector.driver_view``), so neither asyncio nor the client instance, the remoting package or the
executors' ``BrokerView`` are imported either.
"""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_THE_RUNNER = (
    "pyarrow.compute",
    "sparkmq.protocol.running_info",
    "sparkmq.protocol.admin_bodies",
    "asyncio",
    "sparkmq.client.instance",
    "sparkmq.remoting",
    "sparkmq.connector.broker_view",
    "sparkmq.protocol.headers",
    "sparkmq.protocol.admin_headers",
    "ssl",
    "sparkmq.connector.arrow",
    "sparkmq.message.bulk",
    "sparkmq.message.record",
    "msgspec",
    "sparkmq.connector.sink_options",
    "sparkmq.protocol.group_bodies",
    "sparkmq.protocol.acl_signing",  # only a query with credentials signs
    "sparkmq.protocol.namesrv_bodies",
    "sparkmq.client.selector",  # the executors' reads filter, the driver side does not
)


def _loaded_after(statements: str) -> set[str]:
    probe = f"import json, sys\n{statements}\nprint(json.dumps(sorted(sys.modules)))"
    return set(json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True).stdout))


def test_the_driver_side_import_leaves_the_decoding_and_admin_modules_unloaded() -> None:
    # What the runner does before its first request: unpickle the source, make its stream reader and view.
    loaded = _loaded_after(
        "import pyspark.sql.streaming.python_streaming_source_runner\n"
        "import sparkmq.source\n"
        "options = {'namesrvaddr': '127.0.0.1:9', 'topic': 'T', 'consumergroup': 'g'}\n"
        "sparkmq.source.SparkmqDataSource(options).streamReader(None).view  # connects on first use only"
    )
    assert "sparkmq.connector.driver_view" in loaded  # the probe did make the driver side's view
    assert sorted(loaded & set(NOT_FOR_THE_RUNNER)) == []


def test_a_worker_unpickling_a_reader_leaves_the_driver_side_unloaded() -> None:
    # Spark's Python workers unpickle the reader for read(); every object they hold is walked by the
    # gc.collect() a reused worker runs after each task.
    loaded = _loaded_after("import pyspark.worker\nimport sparkmq.source")
    assert "sparkmq.source" in loaded
    assert sorted(loaded & {"sparkmq.connector.driver_view", "sparkmq.protocol.consume_stats"}) == []


def test_a_worker_reading_at_planned_addresses_leaves_the_client_unloaded() -> None:
    # A read task pulls over its own socket or reads the broker's files (connector/planned_reads.py):
    # the client, asyncio and the remoting package load only when a read falls back to the client.
    loaded = _loaded_after(
        "import pyspark.worker\nimport sparkmq.source\n"
        "import sparkmq.connector.arrow, sparkmq.connector.planned_reads  # what read_range imports"
    )
    assert "sparkmq.connector.planned_reads" in loaded
    client = {"asyncio", "sparkmq.client.instance", "sparkmq.client.pull_consumer", "sparkmq.remoting"}
    assert sorted(loaded & (client | {"sparkmq.connector.broker_view"})) == []


def test_the_sinks_driver_side_leaves_the_client_numpy_and_pyarrow_unloaded() -> None:
    # Spark's driver-side processes of a write (the data source lookup, the writer's creation, the
    # streaming commit) unpickle the writer: only the tasks' write() sends (connector/sink_send.py).
    loaded = _loaded_after(
        "import pyspark.sql.worker.python_streaming_sink_runner\n"
        "import sparkmq.sink, sparkmq.source\n"
        "from pyspark.sql.types import BinaryType, StructField, StructType\n"
        "schema = StructType([StructField('body', BinaryType())])\n"
        "options = {'namesrvaddr': '127.0.0.1:9', 'topic': 'T'}\n"
        "writer = sparkmq.source.SparkmqDataSource(options).streamWriter(schema, False)\n"
        "writer.commit([sparkmq.sink.SinkCommitMessage(3)], 0)"
    )
    assert "sparkmq.sink" in loaded
    heavy = {"numpy", "pyarrow", "asyncio", "sparkmq.client.producer", "sparkmq.connector.sink_send"}
    assert sorted(loaded & heavy) == []
