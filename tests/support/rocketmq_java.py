"""Apache RocketMQ 4.9.x itself (NameServer, broker, mqadmin) and the official Java client, as processes.

Everything comes from the cache ``make references`` fills (``$SPARKMQ_REFERENCES_DIR``, by default
``~/.cache/sparkmq/references``): the jars of ``references/*/pom.xml`` and the compiled
``references/runner/ScenarioRunner.java``.

>>> # with ApacheNamesrv.start(tmp) as ns, ApacheBroker.start(tmp, ns.address) as broker:
>>> #     records = run_scenarios(ns.address, "P1", ["tags"], tmp)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

MAKE_TARGET = "make references"
READY_TIMEOUT_S = 60.0
RUNNER_TIMEOUT_S = 240.0
HEAP = ("-Xms256m", "-Xmx512m", "-Xmn128m", "-XX:MaxDirectMemorySize=512m")
# What runserver.sh / runbroker.sh of 4.9.x add on JDK 9+ (the store unmaps files through these internals).
JDK17_OPENS = (
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports",
    "java.base/jdk.internal.ref=ALL-UNNAMED",
)
JVM_GC = ("-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow", "-XX:SoftRefLRUPolicyMSPerMB=0")
LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5p %c{{0}} - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""
Record = dict[str, Any]


class ReferencesMissing(AssertionError):
    """The Maven-fetched references are not in the cache."""


def references_dir() -> Path:
    """Where ``make references`` put the jars and the compiled runner."""
    configured = os.environ.get("SPARKMQ_REFERENCES_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "sparkmq" / "references"


def require_references(*names: str) -> Path:
    """The cache directory, with ``names`` (e.g. ``rocketmq``, ``runner``) fetched; else fail or skip loudly.

    Under CI (``CI=true``) a missing reference fails the test; elsewhere it skips with a warning.
    """
    missing = missing_references(*names)
    if missing:
        fail_or_skip(f"{missing} is missing: run `{MAKE_TARGET}` (it fetches Apache RocketMQ/Kafka with Maven)")
    return references_dir()


def fail_or_skip(message: str) -> None:
    """A test's fetched dependency is missing: fail under CI (``CI=true``), else skip with a warning."""
    import pytest  # only the tests call this; the bench checks with ``missing_references``

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    with warnings.catch_warnings():  # shown in the run's warnings summary, not raised (filterwarnings=error)
        warnings.simplefilter("always")
        warnings.warn(f"SKIPPED: {message}", UserWarning, stacklevel=3)
    pytest.skip(message)


def missing_references(*names: str) -> str | None:
    """The first of ``names`` that ``make references`` has not completed in the cache, or None."""
    root = references_dir()
    for name in names:
        stamp = root / name / (".compiled-from-sources" if name.endswith("runner") else ".fetched-from-pom")
        if not stamp.exists():
            return str(root / name)
    return None


def classpath(*names: str) -> str:
    """The ``java -cp`` of the cache folders ``names`` (``runner`` is the compiled classes)."""
    root = references_dir()
    return os.pathsep.join(
        str(root / name / "classes") if name.endswith("runner") else str(root / name / "*") for name in names
    )


def free_port(below: int = 0) -> int:
    """A loopback port free a moment ago, with ports ``port - below`` .. ``port + 1`` free too."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port - below > 1024 and all(_is_free(port + offset) for offset in range(-below, 2) if offset):
            return port


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class JavaProcess:
    """A JVM started with ``java ...``; its output lines are collected as they arrive."""

    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None

    @classmethod
    def launch(
        cls,
        args: Sequence[str],
        cwd: Path,
        ready: tuple[str, int, str],
        env: Mapping[str, str] | None = None,
        **fields: Any,
    ) -> Self:
        """``java ARGS`` in ``cwd``, then ``wait_ready(*ready)``; ``fields``: the subclass's own."""
        process = subprocess.Popen(
            ["java", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            env=dict(os.environ, **(env or {})),
        )
        started = cls(process, **fields)
        started.pump = threading.Thread(target=started._read, daemon=True)
        started.pump.start()
        started.wait_ready(*ready)
        return started

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line.rstrip("\n"))

    def wait_ready(self, line_part: str, port: int, what: str) -> None:
        """Until ``line_part`` was printed and ``port`` accepts; fail with the output if the JVM exits."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if any(line_part in line for line in self.output) and _port_open(port):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{what} did not become ready:\n" + "\n".join(self.output[-40:]))

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (the JVM's shutdown hooks flush and unregister), SIGKILL after ``timeout_s``."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.pump is not None:
            self.pump.join(5.0)
        if self.process.stdout is not None and (self.pump is None or not self.pump.is_alive()):
            self.process.stdout.close()
        return int(self.process.returncode)

    def __enter__(self) -> JavaProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _home(root: Path, name: str) -> Path:
    """A ROCKETMQ_HOME with the logback file NamesrvStartup / BrokerStartup insist on loading."""
    home = root / name
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "logs").mkdir(exist_ok=True)
    for role in ("namesrv", "broker", "tools"):
        (home / "conf" / f"logback_{role}.xml").write_text(LOGBACK.format(log=home / "logs" / f"{role}.log"))
    return home


def _jvm(home: Path) -> list[str]:
    return [*HEAP, *JVM_GC, *JDK17_OPENS, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}"]


@dataclass
class ApacheNamesrv(JavaProcess):
    """Apache RocketMQ's NameServer (NamesrvStartup) on a free loopback port."""

    port: int = 0

    @classmethod
    def start(cls, root: Path) -> ApacheNamesrv:
        require = missing_references("rocketmq")
        if require:
            raise ReferencesMissing(f"{require} is missing: run `{MAKE_TARGET}`")
        home = _home(root, "apache-namesrv")
        port = free_port()
        conf = home / "namesrv.conf"
        conf.write_text(f"listenPort={port}\n")
        args = [
            *_jvm(home),
            "-cp",
            classpath("rocketmq"),
            "org.apache.rocketmq.namesrv.NamesrvStartup",
            "-c",
            str(conf),
        ]
        return cls.launch(
            args, home, ("boot success", port, "Apache NameServer"), {"ROCKETMQ_HOME": str(home)}, port=port
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


# The broker.conf keys both brokers under comparison share (sparkmq reads the same names).
COMMON_BROKER_CONF: dict[str, str] = {
    "brokerClusterName": "DefaultCluster",
    "brokerName": "broker-a",
    "brokerId": "0",
    "brokerIP1": "127.0.0.1",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "enablePropertyFilter": "true",
    "transactionCheckInterval": "1000",
    "transactionTimeOut": "1000",
    "mapedFileSizeCommitLog": str(64 * 1024 * 1024),
    "mapedFileSizeConsumeQueue": "300000",
    "maxHashSlotNum": "50000",
    "maxIndexNum": "200000",
}


@dataclass
class ApacheBroker(JavaProcess):
    """Apache RocketMQ's broker (BrokerStartup) with its own broker.conf, store and logs under ``root``."""

    port: int = 0
    home: Path = Path()

    @classmethod
    def start(
        cls,
        root: Path,
        namesrv: str,
        *,
        flush: str = "SYNC_FLUSH",
        conf: Mapping[str, str] | None = None,
        acl: str | None = None,
        name: str = "apache-broker",
        port: int = 0,
    ) -> ApacheBroker:
        """``acl``: the text of ``conf/plain_acl.yml`` (with ``aclEnable=true`` in ``conf``); ``name``: its home
        under ``root`` (a second broker, or the same store again); ``port``: its listenPort (0: a free one)."""
        home = _home(root, name)
        if acl is not None:
            (home / "conf" / "plain_acl.yml").write_text(acl)
        port = port or free_port(below=2)  # listenPort - 2 is the VIP channel (fastListenPort), + 1 the HA port
        store = home / "store"
        settings = {
            **COMMON_BROKER_CONF,
            "listenPort": str(port),
            "namesrvAddr": namesrv,
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
            "flushDiskType": flush,
            **(conf or {}),
        }
        conf_file = home / "broker.conf"
        conf_file.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        args = [
            *_jvm(home),
            "-cp",
            classpath("rocketmq"),
            "org.apache.rocketmq.broker.BrokerStartup",
            "-c",
            str(conf_file),
        ]
        env = {"ROCKETMQ_HOME": str(home)}
        return cls.launch(args, home, ("boot success", port, "Apache broker"), env, port=port, home=home)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def client_jvm(log_dir: Path) -> list[str]:
    """JVM options of the Java client processes: small heap, client logs under ``log_dir``."""
    return ["-Xms64m", "-Xmx256m", *JDK17_OPENS, f"-Duser.home={log_dir}", f"-Drocketmq.client.logRoot={log_dir}"]


def run_scenarios(
    namesrv: str,
    prefix: str,
    scenarios: Sequence[str],
    log_dir: Path,
    credentials: tuple[str, str] | None = None,
    timeout_s: float = RUNNER_TIMEOUT_S,
) -> list[Record]:
    """ScenarioRunner's JSON lines for ``scenarios`` (in order) against the cluster of ``namesrv``.

    ``credentials`` (access key, secret key): every client the runner makes signs with them (ACL).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    signing = [f"-Drunner.accessKey={credentials[0]}", f"-Drunner.secretKey={credentials[1]}"] if credentials else []
    args = [
        *client_jvm(log_dir),
        *signing,
        "-cp",
        classpath("runner", "rocketmq"),
        "ScenarioRunner",
        namesrv,
        prefix,
        *scenarios,
    ]
    done = subprocess.run(["java", *args], capture_output=True, text=True, timeout=timeout_s, cwd=log_dir)
    (log_dir / "runner.out").write_text(done.stdout)
    (log_dir / "runner.err").write_text(done.stderr)  # stack traces of the scenarios that failed
    records: list[Record] = []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    if done.returncode != 0:
        raise RuntimeError(f"ScenarioRunner exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return records


def mqadmin(namesrv: str, log_dir: Path, commands: Sequence[str], timeout_s: float = RUNNER_TIMEOUT_S) -> list[Record]:
    """RocketMQ's own mqadmin (rocketmq-tools' MQAdminStartup) ``commands`` with ``-n namesrv``, in one JVM.

    One record per command: ``command``, ``output`` (what it printed), ``error`` (what escaped it, or None).
    """
    home = _home(log_dir, "mqadmin")
    args = [*client_jvm(home), "-cp", classpath("runner", "rocketmq"), "AdminBatch", namesrv, *commands]
    done = subprocess.run(
        ["java", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=home,
        env=dict(os.environ, ROCKETMQ_HOME=str(home)),
    )
    (home / "admin.out").write_text(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"AdminBatch exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
