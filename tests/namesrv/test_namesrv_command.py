"""``sparkmq namesrv`` as a real process: ready line, a request over a socket, SIGTERM → exit 0."""

from __future__ import annotations

import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkmq.cli.main import main
from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode

REPO_ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"^namesrv listening on 127\.0\.0\.1:(\d+)$")
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """One stdout line, or fail after ``timeout`` seconds (never hang the suite)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no ready line within {timeout} s"
    return proc.stdout.readline()


def ask_route(port: int, topic: str) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 7, ext_fields={"topic": topic})
    decoder = FrameDecoder()
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        sock.sendall(request.encode())
        while True:
            chunk = sock.recv(65536)
            assert chunk, "connection closed before a response arrived"
            commands = decoder.feed(chunk)
            if commands:
                return commands[0]


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_namesrv_command_serves_and_stops_cleanly_on_a_signal(stop_signal: signal.Signals) -> None:
    command = [sys.executable, "-m", "sparkmq", "namesrv", "--port", "0", "--scan-interval", "0.5"]
    with subprocess.Popen(
        command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            line = read_line(proc, START_TIMEOUT_S).rstrip("\n")
            match = READY.match(line)
            assert match, f"unexpected ready line {line!r}"
            port = int(match.group(1))
            assert port > 0

            response = ask_route(port, "TopicTest")
            assert response.is_response and response.opaque == 7
            assert response.code == ResponseCode.TOPIC_NOT_EXIST

            started = time.monotonic()
            proc.send_signal(stop_signal)
            code = proc.wait(timeout=STOP_TIMEOUT_S)
            assert proc.stderr is not None
            assert code == 0, f"exit code {code}; stderr:\n{proc.stderr.read()}"
            assert time.monotonic() - started < STOP_TIMEOUT_S
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_bad_option_exits_2_without_starting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["namesrv", "--port", "70000"]) == 2
    assert "port must be 0..65535" in capsys.readouterr().err


def test_connection_limits_come_from_the_command_line() -> None:
    from support.processes import NamesrvProcess

    with NamesrvProcess.start("--max-connections", "2") as namesrv:
        host, port = namesrv.address.rsplit(":", 1)
        with (
            socket.create_connection((host, int(port)), timeout=10.0) as first,
            socket.create_connection((host, int(port)), timeout=10.0) as third_party,
        ):
            first.sendall(
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, ext_fields={"topic": "T"}).encode()
            )
            assert FrameDecoder().feed(first.recv(65536))[0].code == ResponseCode.TOPIC_NOT_EXIST  # both admitted
            with socket.create_connection((host, int(port)), timeout=10.0) as over:
                assert over.recv(1) == b""  # beyond --max-connections: closed at once
            third_party.sendall(
                RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 2, ext_fields={"topic": "T"}).encode()
            )
            assert FrameDecoder().feed(third_party.recv(65536))[0].code == ResponseCode.TOPIC_NOT_EXIST
    with NamesrvProcess.start("--idle-timeout", "0.5") as namesrv:
        host, port = namesrv.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10.0) as idle:
            assert idle.recv(1) == b""  # silent past --idle-timeout: closed
    assert main(["namesrv", "--idle-timeout", "-1"]) == 2
