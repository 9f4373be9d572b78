"""RocketMQ-style persisted metadata files: write tmp → fsync → back up → rename, load with .bak fallback.

``ConfigFile`` serves consumerOffset.json, topics.json, subscriptionGroup.json and
delayOffset.json alike (``ConfigManager.persist`` / ``load`` in RocketMQ). It imports only
:mod:`sparkmq.errors`, so every layer may use it.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from sparkmq.errors import SparkmqError

T = TypeVar("T")


class ConfigFileRecoveredWarning(UserWarning):
    """A metadata file was missing or unusable and its ``.bak`` was loaded instead."""


class ConfigFile(Generic[T]):
    """A metadata file at ``path`` with ``.bak`` and ``.tmp`` siblings.

    ``decode`` turns text into a value (raising ``error`` for unusable text), ``encode``
    turns a value into text. A missing file (and no ``.bak``) loads as ``None``. A crash
    during :meth:`persist` leaves the old or the new file, never a mix.

    Example::

        >>> import json, tempfile
        >>> with tempfile.TemporaryDirectory() as directory:
        ...     f = ConfigFile(os.path.join(directory, "x.json"), json.loads, json.dumps)
        ...     f.persist({"a": 1})
        ...     f.load()
        {'a': 1}
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        decode: Callable[[str], T],
        encode: Callable[[T], str],
        error: type[SparkmqError] = SparkmqError,
        recovered_warning: type[UserWarning] = ConfigFileRecoveredWarning,
    ) -> None:
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + ".bak")
        self.tmp_path = self.path.with_name(self.path.name + ".tmp")
        self._backup_tmp_path = self.path.with_name(self.path.name + ".bak.tmp")
        self._decode = decode
        self._encode = encode
        self._error = error
        self._warning = recovered_warning
        self._lock = threading.Lock()  # two persists at once would interleave writes to .tmp

    def load(self) -> T | None:
        """The value, from ``.bak`` (with a warning) when the file is missing or unusable.

        Raises ``error`` naming both files when neither is usable.
        """
        with self._lock:
            main_missing = False
            try:
                return self._value_of(self.path, self._read(self.path))
            except FileNotFoundError:
                main_missing = True
                main_problem = f"{self.path} is missing"
            except SparkmqError as exc:
                main_problem = exc.remark
            try:
                value = self._value_of(self.backup_path, self._read(self.backup_path))
            except FileNotFoundError as exc:
                if main_missing:
                    return None
                raise self._error(f"{main_problem}; and there is no backup {self.backup_path}") from exc
            except SparkmqError as exc:
                raise self._error(f"{main_problem}; and the backup is unusable too: {exc.remark}") from exc
        warnings.warn(self._warning(f"{main_problem}; loaded {self.backup_path} instead"), stacklevel=2)
        return value

    def persist(self, value: T) -> None:
        """Write ``value`` durably; raise ``error`` when the disk refuses (the old file stays intact)."""
        with self._lock:  # encode under the lock: the last writer then holds the newest state
            data = self._encode(value).encode("utf-8")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _write_synced(self.tmp_path, data)
                self._back_up_current_file()
                os.replace(self.tmp_path, self.path)
                _sync_directory(self.path.parent)
            except OSError as exc:
                raise self._error(f"cannot persist {self.path}: {exc}") from exc

    def _back_up_current_file(self) -> None:
        try:
            current = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            self._value_of(self.path, current)
        except SparkmqError:
            return  # the file about to be replaced is itself broken: keep the older, usable .bak
        _write_synced(self._backup_tmp_path, current)
        os.replace(self._backup_tmp_path, self.backup_path)

    def _read(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self._error(f"cannot read {path}: {exc}") from exc

    def _value_of(self, path: Path, raw: bytes) -> T:
        try:
            return self._decode(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise self._error(f"{path} is not UTF-8 text: {exc}") from exc
        except SparkmqError as exc:
            raise self._error(f"{path} is unusable: {exc.remark}") from exc
        except ValueError as exc:  # json.JSONDecodeError and friends from plain decoders
            raise self._error(f"{path} is unusable: {exc}") from exc

    def __repr__(self) -> str:
        return f"ConfigFile({str(self.path)!r})"


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())


def _sync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (POSIX only)."""
    if os.name != "posix":
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
