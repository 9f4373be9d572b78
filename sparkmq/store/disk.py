"""The durability system calls of the store, in one place.

Every fsync, fdatasync, msync and preallocation the store makes goes through this module's
attributes, looked up at call time, so a test injects a disk fault by replacing one of them
(``monkeypatch.setattr(disk, "fdatasync", failing)``) and nothing else changes.

:func:`preallocate` reserves a segment's blocks when it is created, so a full disk fails that
call with ENOSPC instead of killing the process with SIGBUS at a later write through the mapping.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sparkmq.errors import StoreIOError

fsync = os.fsync
fdatasync = os.fdatasync
fallocate = os.posix_fallocate


def msync(mapping: mmap.mmap, start: int = 0, size: int | None = None) -> None:
    """``msync(MS_SYNC)`` of ``[start, start + size)`` of ``mapping`` (all of it by default)."""
    if size is None:
        mapping.flush()
    else:
        mapping.flush(start, size)


def preallocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes of disk for ``fd``: a full disk fails here, with ENOSPC.

    A sparse file written through a mapping would instead fault (SIGBUS) on the first write
    into a hole the filesystem cannot fill, killing the process.
    """
    fallocate(fd, 0, size)


@contextmanager
def store_io(doing: str) -> Iterator[None]:
    """Turn an ``OSError`` raised inside into :class:`StoreIOError` saying what the store was ``doing``.

    >>> with store_io("reading /nowhere/queues"):
    ...     open("/nowhere/queues")
    Traceback (most recent call last):
    ...
    sparkmq.errors.StoreIOError: reading /nowhere/queues failed: [Errno 2] No such file or directory: '/nowhere/queues'
    """
    try:
        yield
    except OSError as exc:
        raise StoreIOError(f"{doing} failed: {exc}", errno=exc.errno) from exc


def fsync_directory(directory: Path) -> None:
    """Make the entries of ``directory`` (a file created or renamed in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def make_directories(directory: Path) -> None:
    """``mkdir -p`` whose new entries are durable: each created level's parent is fsynced."""
    if directory.is_dir():
        return
    make_directories(directory.parent)
    directory.mkdir(exist_ok=True)
    fsync_directory(directory.parent)
