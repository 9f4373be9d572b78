"""Run the real RocketMQ 5 Python client (PyPI rocketmq-python-client 5.1.2) for tests/grpc.

The client lives in ``<repo>/.venv-rocketmq5`` (``make rocketmq5-venv``; ``make venv`` includes it)
and is driven by ``tests/grpc/rmq5_client.py``, one JSON line per event, through the same
subprocess harness as the C++ client.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path

from support.processes import REPO_ROOT
from support.rocketmq_cpp import CppClientRun, Record

RMQ5_PYTHON = REPO_ROOT / ".venv-rocketmq5" / "bin" / "python"
RMQ5_DRIVER = REPO_ROOT / "tests" / "grpc" / "rmq5_client.py"
CLIENT_TIMEOUT_S = 60.0


def require_rmq5_python() -> Path:
    """The interpreter with the 5.x client; a clear failure (not a skip) naming the make target."""
    if not os.access(RMQ5_PYTHON, os.X_OK):
        raise AssertionError(f"{RMQ5_PYTHON} is missing: run `make rocketmq5-venv`")
    return RMQ5_PYTHON


def run5(home: Path, *args: str) -> CppClientRun:
    """Start ``rmq5_client.py ARGS`` with HOME=``home`` (the client logs under $HOME/logs)."""
    return CppClientRun.start(home, *args, python=require_rmq5_python(), driver=RMQ5_DRIVER)


def finished(run: CppClientRun, timeout_s: float = CLIENT_TIMEOUT_S) -> list[Record]:
    """The records of a client run once it exits cleanly (killed on the way out, whatever happens)."""
    try:
        return run.finish(timeout_s)
    finally:
        run.kill()


def of(records: list[Record], event: str) -> list[Record]:
    """The records of one kind (``sent``, ``received``, ...)."""
    return [r for r in records if r["event"] == event]


def check_transactions(producer: CppClientRun, receive: Callable[[], list[Record]]) -> None:
    """A transactional producer run (commit, rollback, and an orphan its checker commits when the broker
    asks) until it waits; then ``receive()`` gets the committed two, and the producer is stopped."""
    try:
        producer.wait_for(lambda run: bool(run.events("waiting")), CLIENT_TIMEOUT_S, "the broker's check")
        received = of(receive(), "received")
        producer.request_stop()
        records = producer.finish(CLIENT_TIMEOUT_S)
    finally:
        producer.kill()
    sent = {r["body"]: r["id"] for r in of(records, "sent")}
    assert [r["body"] for r in of(records, "checked")] == ["orphan"]
    assert sorted(r["body"] for r in received) == ["commit", "orphan"]
    assert {r["id"] for r in received} == {sent["commit"], sent["orphan"]}


def name_maker(prefix: str) -> Callable[[str], tuple[str, str]]:
    """``names(kind)``: a fresh (topic, group) pair per scenario, e.g. ``("GrpcFifoTopic3", "GrpcFifoGroup3")``."""
    counter = itertools.count()

    def names(kind: str) -> tuple[str, str]:
        n = next(counter)
        return f"{prefix}{kind}Topic{n}", f"{prefix}{kind}Group{n}"

    return names


def all_sent(records: list[Record], count: int) -> list[Record]:
    """A producer run's ``sent`` records, ``count`` of them."""
    sent = of(records, "sent")
    assert len(sent) == count, records
    return sent
