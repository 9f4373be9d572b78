"""Run the real C++ RocketMQ client (PyPI ``rocketmq`` 0.4.4) in subprocesses for interop tests.

The wheel lives in its own virtualenv, ``<repo>/.venv-rocketmq`` (``make venv`` creates it), and
is driven by ``tests/interop/cpp_client.py``, which prints one JSON line per event.

>>> # run = CppClientRun.start(home, "produce", "--namesrv", ns, "--topic", "T", "--group", "P", "--count", "3")
>>> # sent = run.finish(timeout_s=30)   # the "sent" records, after a clean exit
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.processes import REPO_ROOT

CPP_PYTHON = REPO_ROOT / ".venv-rocketmq" / "bin" / "python"
DRIVER = REPO_ROOT / "tests" / "interop" / "cpp_client.py"
# The transaction producer: PyPI rocketmq-client-python 0.5.0rc2 in .venv-rocketmq-tx (0.4.4 has none).
CPP_TX_PYTHON = REPO_ROOT / ".venv-rocketmq-tx" / "bin" / "python"
TX_DRIVER = REPO_ROOT / "tests" / "interop" / "cpp_tx_client.py"
Record = dict[str, Any]


def require_cpp_python(python: Path = CPP_PYTHON) -> Path:
    """The interpreter that has the C++ client; a clear failure (not a skip) when it is missing."""
    if not os.access(python, os.X_OK):
        raise AssertionError(f"{python} is missing: run `make venv` (it creates {python.parents[1].name})")
    return python


@dataclass
class CppClientRun:
    """One driver subprocess; its JSON lines are collected as they arrive."""

    command: list[str]
    process: subprocess.Popen[str]
    records: list[Record] = field(default_factory=list)
    stderr_lines: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pumps: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, home: Path, *args: str, python: Path = CPP_PYTHON, driver: Path = DRIVER) -> CppClientRun:
        """Start ``driver ARGS`` (``cpp_client.py``) with HOME=``home`` (the C++ library logs under $HOME/logs)."""
        return cls.launch(home, [str(require_cpp_python(python)), str(driver), *args])

    @classmethod
    def launch(cls, home: Path, command: list[str]) -> CppClientRun:
        """Start ``command`` (a driver printing one JSON line per event) with HOME=``home``."""
        home.mkdir(parents=True, exist_ok=True)
        env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env.update(HOME=str(home), PYTHONUNBUFFERED="1")
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=home
        )
        run = cls(command, process)
        run.pumps = [
            threading.Thread(target=run._pump_stdout, daemon=True),
            threading.Thread(target=run._pump_stderr, daemon=True),
        ]
        for pump in run.pumps:
            pump.start()
        return run

    def _pump_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = {"event": "noise", "line": line.rstrip("\n")}
            with self.lock:
                self.records.append(record)

    def _pump_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr_lines.append(line.rstrip("\n"))

    def events(self, kind: str) -> list[Record]:
        with self.lock:
            return [record for record in self.records if record.get("event") == kind]

    def wait_for(self, predicate: Callable[[CppClientRun], bool], timeout_s: float, what: str) -> None:
        """Poll until ``predicate(self)``; fail with the client's output if it exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self):
            if self.process.poll() is not None and not predicate(self):
                raise AssertionError(f"client exited ({self.process.returncode}) before {what}\n{self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{self.describe()}")
            time.sleep(0.05)

    def request_stop(self) -> None:
        """Ask a ``push-consume --until-stdin`` run to shut down cleanly."""
        assert self.process.stdin is not None
        if self.process.poll() is None:
            try:
                self.process.stdin.write("stop\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass  # it exited already; finish() reports how

    def finish(self, timeout_s: float) -> list[Record]:
        """Wait for a clean exit (rc 0 and a final event); return all records. Kills it on timeout."""
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"client did not exit within {timeout_s} s\n{self.describe()}") from None
        self._close_pipes()
        if self.process.returncode != 0 and not self.aborted_in_shutdown():
            raise AssertionError(f"client failed with rc {self.process.returncode}\n{self.describe()}")
        with self.lock:
            return list(self.records)

    def aborted_in_shutdown(self) -> bool:
        """The C++ library's known abort inside ``shutdown()`` (boost::thread_interrupted thrown in a
        thread it interrupts; apache/rocketmq-client-cpp#204): SIGABRT after the driver's last record,
        its "shutdown" announcement. Everything the test asserts was recorded before it."""
        with self.lock:
            last = self.records[-1]["event"] if self.records else None
        return (
            self.process.returncode == -signal.SIGABRT
            and last == "shutdown"
            and any("thread_interrupted" in line for line in self.stderr_lines)
        )

    def kill(self) -> None:
        """SIGKILL and reap (cleanup path of every test)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        """After exit: let the readers drain to EOF, then close every pipe (no ResourceWarning)."""
        for pump in self.pumps:
            pump.join(5.0)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(BrokenPipeError):  # unflushed "stop" to a process that is gone
                    pipe.close()

    def describe(self) -> str:
        with self.lock:
            tail = [json.dumps(record) for record in self.records[-10:]]
        return (
            f"command: {' '.join(self.command)}\nlast stdout records:\n  "
            + "\n  ".join(tail)
            + "\nstderr:\n  "
            + "\n  ".join(self.stderr_lines[-30:])
        )
