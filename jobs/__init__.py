"""Spark pipelines built on sparkmq's public API."""
