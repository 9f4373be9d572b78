"""A topic table's upkeep: compaction of its small files and vacuum of the files no recent version reads.

Plain functions over a table URI, for the broker to call periodically (each commit of a materializer
adds at least one small file). Neither changes the rows nor the queues' application
transactions, so what a reader's offsets point at stays where it was.

>>> # compact(table_uri(root, "orders")).files_removed, vacuum(table_uri(root, "orders"), 168)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable

from sparkmq.errors import ConfigError

TARGET_FILE_BYTES = 128 * 1024 * 1024  # what compaction aims at (Delta's own default is 100 MiB to 1 GiB)


@dataclass(frozen=True)
class Compaction:
    """What one compaction did: files rewritten into fewer, and the table version it committed (None: none)."""

    files_removed: int
    files_added: int
    version: int | None


def compact(
    uri: str, target_bytes: int = TARGET_FILE_BYTES, storage_options: Mapping[str, str] | None = None
) -> Compaction:
    """Rewrite the table's small files into files of about ``target_bytes`` (one commit, rows unchanged)."""
    table = DeltaTable(uri, storage_options=dict(storage_options or {}) or None)
    before = table.version()
    metrics: dict[str, Any] = table.optimize.compact(target_size=target_bytes)
    after = table.version()
    return Compaction(
        int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0)), after if after != before else None
    )


def checkpoint(uri: str, storage_options: Mapping[str, str] | None = None) -> int:
    """Write a checkpoint of the table's latest version (what a new reader's snapshot starts from); that version."""
    table = DeltaTable(uri, storage_options=dict(storage_options or {}) or None)
    table.create_checkpoint()
    return table.version()


def vacuum(uri: str, retention_hours: int, storage_options: Mapping[str, str] | None = None) -> list[str]:
    """Delete the files that no version of the last ``retention_hours`` reads; the deleted files' paths.

    A retention below the table's own ``delta.deletedFileRetentionDuration`` (7 days by default) is the
    caller's explicit choice and applies: a reader still on an older snapshot then loses its files.
    """
    if retention_hours < 0:
        raise ConfigError(f"vacuum retention must not be negative, got {retention_hours} hours")
    table = DeltaTable(uri, storage_options=dict(storage_options or {}) or None)
    return sorted(table.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False))


__all__ = ["TARGET_FILE_BYTES", "Compaction", "checkpoint", "compact", "vacuum"]
