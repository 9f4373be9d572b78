"""The durability system calls of the store, in one place.

Every fsync, fdatasync, msync and preallocation the store makes goes through this module's
attributes, looked up at call time, so a test injects a disk fault by replacing one of them
(``monkeypatch.setattr(disk, "fdatasync", failing)``) and nothing else changes.

:func:`preallocate` reserves a segment's blocks when it is created, so a full disk fails that
call with ENOSPC instead of killing the process with SIGBUS at a later write through the mapping.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sparkmq.errors import StoreIOError

fsync = os.fsync
fdatasync = os.fdatasync
fallocate = os.posix_fallocate
pread = os.pread  # the body CRC check's reads (body_verify): a fault there halts the check, never the broker


def msync(mapping: mmap.mmap, start: int = 0, size: int | None = None) -> None:
    """``msync(MS_SYNC)`` of ``[start, start + size)`` of ``mapping`` (all of it by default).

    Through libc by ctypes where it is found, which releases the GIL for the disk wait:
    ``mmap.flush`` holds it, and an index or ConsumeQueue flush then stalled the event loop
    for milliseconds (docs/design-notes.md, "Flushes and the GIL"). Whoever closes a mapping waits for the
    flush lock first (``StoreFlush``), so the buffer export below never blocks a close.
    """
    if size is None:
        start, size = 0, len(mapping)
    if _libc_msync is None or size <= 0:
        mapping.flush(start, size)
        return
    aligned = start - start % mmap.PAGESIZE
    anchor = ctypes.c_char.from_buffer(mapping)  # the mapping's address; released below
    try:
        address = ctypes.addressof(anchor) + aligned
        if _libc_msync(ctypes.c_void_p(address), ctypes.c_size_t(size + start - aligned), _MS_SYNC) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"msync: {os.strerror(error)}")
    finally:
        del anchor


def _find_libc_msync() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    function: Callable[..., int] = libc.msync
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)  # type: ignore[attr-defined]  # ctypes
    function.restype = ctypes.c_int  # type: ignore[attr-defined]  # ctypes function attributes
    return function


_MS_SYNC = 4  # <sys/mman.h> on Linux
_libc_msync = _find_libc_msync()


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
