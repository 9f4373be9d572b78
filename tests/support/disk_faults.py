"""Disk faults for tests: an fsync that stalls until released (the real one runs afterwards)."""

from __future__ import annotations

import threading

from sparkmq.store import disk


class StalledSync:
    """An fdatasync that blocks until ``release`` is set; ``entered`` says one started.

    Install it with ``monkeypatch.setattr(disk, "fdatasync", stall)``; set ``release`` in a
    ``finally`` so a failing test cannot leave the flush thread (and the store's close) blocked.
    """

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.real = disk.fdatasync

    def __call__(self, fd: int) -> None:
        if not self.release.is_set():
            self.entered.set()
            self.release.wait()
        self.real(fd)
