"""Run the real RocketMQ 5 Java client (Maven Central ``rocketmq-client-java`` 5.0.7, gRPC) for tests/grpc.

``make references`` fetches the client into the cache (``references/rocketmq5-client/pom.xml``) and
compiles its scenarios (``references/rocketmq5-runner/Rmq5*.java``, one main each); each prints one
JSON line per event, collected by the same subprocess harness as the Python clients.
"""

from __future__ import annotations

from pathlib import Path

from support.rocketmq_cpp import CppClientRun
from support.rocketmq_java import JDK17_OPENS, classpath, fail_or_skip, missing_references

NAMES = ("rocketmq5-runner", "rocketmq5-client")


def require_java5() -> None:
    """The client and its compiled scenarios are in the cache; else fail under CI, skip loudly elsewhere."""
    missing = missing_references(*NAMES)
    if missing:
        fail_or_skip(f"{missing} is missing: run `make references` (it fetches the RocketMQ 5 Java client)")


def run_java5(home: Path, main: str, *args: str) -> CppClientRun:
    """Start scenario ``main`` (e.g. ``Rmq5Produce``) with ``args``; its client logs go under ``home``."""
    jvm = ["-Xms32m", "-Xmx192m", *JDK17_OPENS, f"-Duser.home={home}", "-Drocketmq.log.level=WARN"]
    return CppClientRun.launch(home, ["java", *jvm, "-cp", classpath(*NAMES), main, *args])
