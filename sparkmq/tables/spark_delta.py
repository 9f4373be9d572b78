"""Delta Lake for Spark: the jars ``make delta-jars`` fetched, and the settings a SparkSession needs.

>>> # spark = with_delta(SparkSession.builder.master("local[2]")).getOrCreate()
>>> # spark.read.format("delta").load(table_uri(root, "orders"))
>>> MAKE_TARGET
'make delta-jars'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparkmq.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MAKE_TARGET = "make delta-jars"
SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Each read plans its scan by a Spark job over the table's cached snapshot state, one task per partition
    # of that state (Delta's default: 50). A topic table, compacted by its upkeep, lists few files, which one
    # task collects for a fifth of the CPU that 50 take (docs/tables.md "Read speed"). A later `.config` wins.
    "spark.databricks.delta.snapshotPartitions": "1",
}


class DeltaJarsMissing(ConfigError):
    """Delta's jars are not in the cache: ``make delta-jars`` fetches them."""


def jars_dir() -> Path:
    """Where ``make delta-jars`` puts them (``$SPARKMQ_JARS_DIR/delta``, by default ``~/.cache/sparkmq/jars``)."""
    configured = os.environ.get("SPARKMQ_JARS_DIR")
    return (Path(configured) if configured else Path.home() / ".cache" / "sparkmq" / "jars") / "delta"


def missing_jars() -> str | None:
    """Why the jars cannot be used (a message naming the make target), or None when they are there."""
    folder = jars_dir()
    if not (folder / ".fetched-from-pom").exists() or not any(folder.glob("delta-spark_*.jar")):
        return f"Delta Lake's jars for Spark are not in {folder}: run `{MAKE_TARGET}`"
    return None


def delta_jars() -> list[Path]:
    """The jar files, sorted; :class:`DeltaJarsMissing` when ``make delta-jars`` has not run."""
    missing = missing_jars()
    if missing:
        raise DeltaJarsMissing(missing)
    return sorted(jars_dir().glob("*.jar"))


def with_delta(builder: SparkSession.Builder, extra_jars: Sequence[Path] = ()) -> SparkSession.Builder:
    """``builder`` with Delta's jars (and ``extra_jars``) on Spark's classpath, its SQL extension, its catalog
    and its snapshot state in one partition (see ``SETTINGS``)."""
    builder = builder.config("spark.jars", ",".join(str(jar) for jar in [*delta_jars(), *extra_jars]))
    for key, value in SETTINGS.items():
        builder = builder.config(key, value)
    return builder


__all__ = ["MAKE_TARGET", "SETTINGS", "DeltaJarsMissing", "delta_jars", "jars_dir", "missing_jars", "with_delta"]
