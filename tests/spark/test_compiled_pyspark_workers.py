"""Spark's own Python processes import the installed pyspark's bytecode, not ``pyspark.zip``.

The streaming-source runner is a fresh Python process per query of a Python source; compiling
pyspark from the zip there was most of each query's fixed start-up cost (sparkmq_compiled_pyspark.py).
A probe source reports, from each process Spark runs it in, which pyspark that process imported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


def report(where: str, role: str) -> None:
    import os

    import pyspark as imported

    with open(where, "a", encoding="utf-8") as out:
        out.write(json.dumps({"role": role, "pid": os.getpid(), "pyspark": imported.__file__}) + "\n")


class ProbeReader(DataSourceStreamReader):
    def __init__(self, where: str) -> None:
        self.where = where
        report(where, "streaming-source runner")

    def initialOffset(self) -> dict[str, int]:
        return {"offset": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"offset": 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        report(self.where, "task")
        yield (1,)


class ProbeSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "compiled_pyspark_probe"

    def schema(self) -> str:
        return "x int"

    def streamReader(self, schema: Any) -> ProbeReader:
        return ProbeReader(self.options["where"])


def test_the_streaming_runner_and_the_tasks_import_pyspark_from_the_installed_package(
    spark: Any, tmp_path: Path
) -> None:
    where = tmp_path / "imports.jsonl"
    spark.dataSource.register(ProbeSource)
    query = (
        spark.readStream.format("compiled_pyspark_probe")
        .option("where", str(where))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    reports = [json.loads(line) for line in where.read_text().splitlines()]
    assert {entry["role"] for entry in reports} == {"streaming-source runner", "task"}
    assert {entry["pyspark"] for entry in reports} == {pyspark.__file__}
