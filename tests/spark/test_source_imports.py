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
)


def test_the_driver_side_import_leaves_the_decoding_and_admin_modules_unloaded() -> None:
    probe = (
        "import json, sys; import pyspark.sql.streaming.python_streaming_source_runner; import sparkmq.source; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True).stdout))
    assert "sparkmq.connector.driver_view" in loaded  # the probe did import the source
    assert sorted(loaded & set(NOT_FOR_THE_RUNNER)) == []
