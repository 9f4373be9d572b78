"""Disk faults for tests: an fsync that stalls until released (the real one runs afterwards), a disk too full for a
CommitLog segment."""

from __future__ import annotations

import errno
import os
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


class NoSpaceForCommitLog:
    """A ``disk.fallocate`` failing with ENOSPC for CommitLog segments (the next one cannot be created).

    Install it with ``monkeypatch.setattr(disk, "fallocate", NoSpaceForCommitLog())``.
    """

    def __init__(self) -> None:
        self.real = disk.fallocate

    def __call__(self, fd: int, offset: int, size: int) -> None:
        if "/commitlog/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.real(fd, offset, size)
