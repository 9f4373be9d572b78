"""A real S3-compatible server process on localhost for the table tests: moto's server mode, objects in memory.

``S3Server.start()`` runs ``python -m moto.server`` on a free port and creates one bucket; ``options``
are deltalake's storage options for it (short timeouts and one retry, so a stopped server stalls a
cycle in seconds, not minutes). ``pause()``/``resume()`` stop and continue the process (SIGSTOP /
SIGCONT): an unreachable store whose objects survive. Without moto (the ``test`` extra) a test fails
under CI and skips loudly elsewhere.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from support.rocketmq_java import fail_or_skip, free_port

BUCKET = "tables"
START_DEADLINE_S = 30.0


@dataclass
class S3Server:
    process: subprocess.Popen[bytes]
    endpoint: str

    @property
    def options(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
            "timeout": "2s",
            "max_retries": "1",
            "retry_timeout": "3s",
        }

    @property
    def conf_value(self) -> str:
        """``options`` as broker.conf's ``tableTopicStorageOptions``."""
        return ",".join(f"{k}={v}" for k, v in self.options.items())

    def root(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    @classmethod
    @contextmanager
    def start(cls) -> Iterator[S3Server]:
        if importlib.util.find_spec("moto") is None:
            fail_or_skip(
                "moto is not installed: make venv (it installs the test extra of pyproject.toml, moto[server])"
            )
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        server = cls(process, f"http://127.0.0.1:{port}")
        try:
            server._create_bucket()
            yield server
        finally:
            server.resume()
            process.terminate()
            process.wait(10)

    def _create_bucket(self) -> None:
        deadline = time.monotonic() + START_DEADLINE_S
        request = urllib.request.Request(f"{self.endpoint}/{BUCKET}", method="PUT")
        while True:
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    assert response.status == 200, response.status
                    return
            except OSError:
                assert self.process.poll() is None, "moto's server exited at start"
                assert time.monotonic() < deadline, f"moto's server did not answer on {self.endpoint}"
                time.sleep(0.1)
