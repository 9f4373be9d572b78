"""Auto-registration shim: PySpark registers ``pyspark_<name>.DefaultSource`` modules by their name()."""

from sparkmq.source import SparkmqDataSource as DefaultSource

__all__ = ["DefaultSource"]
