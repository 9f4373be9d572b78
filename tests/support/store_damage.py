"""Damage written into a store's files the way a disk or a stray tool would: with ``os.pwrite`` on the
file, under a running broker's mappings (they share the page cache, so the broker sees it at once)."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

UNIT_BYTES = 20
UNIT_KINDS = ("negative_size", "wild_offset", "mismatching_head")


def unit_path(store_root: Path, topic: str, queue_id: int, queue_offset: int, file_bytes: int) -> tuple[Path, int]:
    """The ConsumeQueue file holding ``queue_offset`` and the unit's position in it."""
    at = queue_offset * UNIT_BYTES
    start = at - at % file_bytes
    return store_root / "consumequeue" / topic / str(queue_id) / f"{start:020d}", at - start


def read_unit(path: Path, position: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(position)
        return f.read(UNIT_BYTES)


def damage_unit(path: Path, position: int, kind: str) -> bytes:
    """Damage the unit at ``position`` of ``path``; returns what it held.

    ``negative_size``: its size reads -7; ``wild_offset``: its offset points 1 TiB on;
    ``mismatching_head``: it names the previous unit's record (another queue offset).
    """
    old = read_unit(path, position)
    if kind == "negative_size":
        new = old[:8] + (-7).to_bytes(4, "big", signed=True) + old[12:]
    elif kind == "wild_offset":
        new = (int.from_bytes(old[:8], "big") + (1 << 40)).to_bytes(8, "big") + old[8:]
    elif kind == "mismatching_head":
        assert position >= UNIT_BYTES, "the first unit of a file has no previous unit to name"
        new = read_unit(path, position - UNIT_BYTES)[:12] + old[12:]
    else:
        raise ValueError(f"unknown damage {kind!r}")
    _pwrite(path, position, new)
    return old


def damage_bytes(path: Path, position: int, data: bytes) -> bytes:
    """Overwrite ``len(data)`` bytes at ``position``; returns what they held."""
    with open(path, "rb") as f:
        f.seek(position)
        old = f.read(len(data))
    _pwrite(path, position, data)
    return old


def _pwrite(path: Path, position: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, data, position) == len(data)
    finally:
        os.close(fd)


def damaged_counts(metrics_port: int, kind: str) -> dict[str, float]:
    """A broker's ``sparkmq_store_damaged_total`` for ``kind`` of file, by outcome, from its Prometheus port."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "sparkmq_store_damaged_total" and sample.labels["kind"] == kind
    }
