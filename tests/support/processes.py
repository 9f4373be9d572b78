"""Real sparkmq service processes for tests: started on free loopback ports, stopped by handle.

>>> # with NamesrvProcess.start() as ns, BrokerProcess.start(tmp_path, ns.address) as broker:
>>> #     ... talk to broker.address ...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import sparkmq

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where this process imports sparkmq from: the checkout, or a build of it (``make native-check``'s sanitized
#: one, by PYTHONPATH). The services started here import the same package, so the same extensions.
PACKAGE_ROOT = Path(sparkmq.__file__).resolve().parents[1]
SERVICE_PYTHONPATH = os.pathsep.join(dict.fromkeys([str(PACKAGE_ROOT), str(REPO_ROOT)]))
READY_TIMEOUT_S = 30.0


# The thread reading each process's stdout, by pid: joined (EOF) before the pipe is closed.
_PUMPS: dict[int, threading.Thread] = {}


def _release_output(process: subprocess.Popen[str]) -> None:
    """After the process is reaped: let the reader reach EOF, then close the pipe (no ResourceWarning)."""
    pump = _PUMPS.pop(process.pid, None)
    if pump is not None:
        pump.join(5.0)
    if process.stdout is not None and (pump is None or not pump.is_alive()):
        process.stdout.close()


@dataclass
class ServiceProcess:
    """A running ``python -m sparkmq ...`` process and the address it announced."""

    process: subprocess.Popen[str]
    ready_line: str
    output: list[str] = field(default_factory=list)

    @classmethod
    def launch(cls, args: Sequence[str], ready_prefix: str, env: dict[str, str] | None = None) -> ServiceProcess:
        """Start the process and wait for its ready line (stdout); fail with its output if it dies."""
        full_env = dict(os.environ, PYTHONPATH=SERVICE_PYTHONPATH, PYTHONUNBUFFERED="1", **(env or {}))
        process = subprocess.Popen(
            [sys.executable, "-m", "sparkmq", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
            cwd=REPO_ROOT,
        )
        output: list[str] = []
        ready: list[str] = []
        seen = threading.Event()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                output.append(line.rstrip("\n"))
                if not ready and line.startswith(ready_prefix):
                    ready.append(line.strip())
                    seen.set()
            seen.set()

        pump_thread = threading.Thread(target=pump, daemon=True)
        pump_thread.start()
        _PUMPS[process.pid] = pump_thread
        if not seen.wait(READY_TIMEOUT_S) or not ready:
            process.kill()
            process.wait()
            _release_output(process)
            raise RuntimeError(f"{' '.join(args)} did not become ready:\n" + "\n".join(output[-40:]))
        return cls(process, ready[0], output)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _release_output(self.process)
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        _release_output(self.process)

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@dataclass
class NamesrvProcess(ServiceProcess):
    """``sparkmq namesrv`` on a free port."""

    @classmethod
    def start(cls, *extra: str) -> NamesrvProcess:
        launched = ServiceProcess.launch(
            ["namesrv", "--host", "127.0.0.1", "--port", "0", *extra], "namesrv listening on"
        )
        return cls(launched.process, launched.ready_line, launched.output)

    @property
    def address(self) -> str:
        return self.ready_line.rsplit(" ", 1)[-1]


# Store files are preallocated: modest sizes keep every test broker from reserving 1.4 GB of disk
# (1 GiB CommitLog segment + 420 MB IndexFile). A later ``--set`` of the same key wins.
SMALL_STORE = (
    "--set",
    "mapedFileSizeCommitLog=16777216",
    "--set",
    "mapedFileSizeConsumeQueue=300000",
    "--set",
    "maxHashSlotNum=50000",
    "--set",
    "maxIndexNum=200000",
)


@dataclass
class BrokerProcess(ServiceProcess):
    """``sparkmq broker`` on a free port with its store under ``store_dir``."""

    @classmethod
    def start(cls, store_dir: Path, namesrv: str | None, *extra: str, port: int = 0) -> BrokerProcess:
        args = [
            "broker",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--store-dir",
            str(store_dir),
            *SMALL_STORE,
            *extra,
        ]
        if namesrv:
            args += ["--namesrv", namesrv]
        launched = ServiceProcess.launch(args, "broker listening on")
        return cls(launched.process, launched.ready_line, launched.output)

    @property
    def address(self) -> str:
        return self.ready_line.rsplit(" ", 1)[-1]

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])


def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until true or the timeout passes; return its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
