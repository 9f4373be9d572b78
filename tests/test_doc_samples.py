"""Every code sample of the README and docs/ that is marked to run runs here, against real services.

The convention (docs/README.md, "Code samples"): a ```python block is a script and a ```console block
a shell session (``$ `` starts a command, ``> `` continues it, other lines are output, not checked);
both run unless the fence says ``no-run`` followed by the reason. Any other fence (```ini, ```json,
a bare one) is text. The samples of one page run in order, as a reader would, against one
:class:`~sparkmq.embedded.EmbeddedCluster` of their own: its NameServer and broker stand in for the
``127.0.0.1:9876`` and ``127.0.0.1:10911`` the pages use, and the ``sparkmq`` and ``python`` they
call are this interpreter's environment with this checkout first on the path.

The Grafana dashboard committed under deploy/grafana and the alert rules of docs/operations.md are
checked here too: every metric they query is one a broker started with ``metricsExporterType=PROM``
really exports.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkmq.client import Message, Producer, PullConsumer
from sparkmq.embedded import EmbeddedCluster
from support.client_harness import create_topic, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess, wait_until

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
RUNNABLE = ("python", "console")
NAMESRV, BROKER = "127.0.0.1:9876", "127.0.0.1:10911"
SAMPLE_TIMEOUT_S = 300.0
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "sparkmq-broker.json"
OPERATIONS = REPO_ROOT / "docs" / "operations.md"
METRIC_NAME = re.compile(r"\b(?:rocketmq|sparkmq)_[a-z_]+\b")


@dataclass(frozen=True)
class Sample:
    """One fenced block: its page, the line of its opening fence, its language, the fence's rest and its text."""

    page: Path
    line: int
    language: str
    info: str
    text: str

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and not self.info.startswith("no-run")

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def samples(page: Path) -> list[Sample]:
    """The fenced blocks of ``page``, in order."""
    found, opening, body = [], None, []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.startswith("```"):
            if opening is not None:
                body.append(line)
            continue
        if opening is None:
            words = line[3:].strip().split(maxsplit=1)
            opening, body = (number, words[0] if words else "", words[1] if len(words) > 1 else ""), []
        else:
            found.append(Sample(page, opening[0], opening[1], opening[2], "\n".join(body) + "\n"))
            opening = None
    assert opening is None, f"{page.relative_to(REPO_ROOT)}:{opening[0]}: a fence that never closes"
    return found


def console_script(text: str) -> str:
    """The commands of a console block (``$ `` lines and their ``> `` continuations), one per line."""
    commands: list[str] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            commands.append(line[2:])
        elif line.startswith("> ") or line == ">":
            assert commands, f"a continuation with no command before it: {line!r}"
            commands[-1] += "\n" + line[2:]
    return "set -euo pipefail\n" + "\n".join(commands) + "\n"


def sample_env() -> dict[str, str]:
    """A user's shell in this environment: its bin folder first on PATH, this checkout importable."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(REPO_ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def run_sample(sample: Sample, cluster: EmbeddedCluster, cwd: Path) -> None:
    text = sample.text.replace(NAMESRV, cluster.namesrv_address).replace(BROKER, cluster.broker_address)
    command = [sys.executable, "-c", text] if sample.language == "python" else ["bash", "-c", console_script(text)]
    done = subprocess.run(
        command, cwd=cwd, env=sample_env(), capture_output=True, text=True, timeout=SAMPLE_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, (
        f"the sample at {sample.where} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


PAGES_WITH_SAMPLES = [page for page in PAGES if any(sample.runs for sample in samples(page))]


@pytest.mark.parametrize("page", PAGES_WITH_SAMPLES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_the_samples_of_a_page_run_in_order(page: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with EmbeddedCluster(tmp_path / "store") as cluster:
        for sample in samples(page):
            if sample.runs:
                run_sample(sample, cluster, work)


def test_a_sample_that_does_not_run_says_why() -> None:
    silent = [
        sample.where
        for page in PAGES
        for sample in samples(page)
        if sample.language in RUNNABLE and sample.info.startswith("no-run") and not sample.info[6:].strip(" :")
    ]
    assert not silent, "a no-run sample must give its reason after no-run:\n" + "\n".join(silent)


def test_guides_run_their_shell_samples_as_console_blocks() -> None:
    """A shell sample is a ```console block (run), never ```sh or ```bash (which would not)."""
    shells = [sample.where for page in PAGES for sample in samples(page) if sample.language in ("sh", "bash", "shell")]
    assert not shells, "use ```console for shell samples:\n" + "\n".join(shells)


def test_console_commands_and_continuations() -> None:
    script = console_script("$ echo a \\\n> b\na b\n$ true\n")
    assert script == "set -euo pipefail\necho a \\\nb\ntrue\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def exported_metric_names(port: int) -> set[str]:
    """The sample names a scrape returns, and those of families declared with no sample yet (a counter
    of damage never found)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {sample.name for sample in family.samples}
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def queried_metrics() -> dict[str, set[str]]:
    """The metric names each monitoring artefact queries: the dashboard, and the alert rules of the operations guide."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    queries += [json.dumps(variable.get("query", "")) for variable in dashboard["templating"]["list"]]
    rules = [sample.text for sample in samples(OPERATIONS) if sample.language == "yaml"]
    return {
        str(DASHBOARD.relative_to(REPO_ROOT)): {name for query in queries for name in METRIC_NAME.findall(query)},
        "the alert rules of docs/operations.md": {name for rule in rules for name in METRIC_NAME.findall(rule)},
    }


def test_the_grafana_dashboard_and_alerts_query_only_exported_metrics(tmp_path: Path) -> None:
    """A broker with the exporter on, a producer and a group connected, a topic written and partly
    consumed: every metric name the dashboard and the alert rules query is among the names it exports."""
    queried = queried_metrics()
    assert all(queried.values()), queried
    port, topic, group = free_port(), f"T_{uuid.uuid4().hex[:8]}", f"CID_{uuid.uuid4().hex[:8]}"
    prom = ("metricsExporterType=PROM", "metricsPromExporterHost=127.0.0.1", f"metricsPromExporterPort={port}")
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(tmp_path, namesrv.address, *(f"--set={key}" for key in prom)) as broker,
    ):
        create_topic([broker.address], topic, 1)
        wait_for_route(namesrv.address, topic, {"broker-a"})
        with Producer("PID_dashboard", namesrv.address) as producer, PullConsumer(group, namesrv.address) as consumer:
            for i in range(4):
                producer.send(Message(topic, b"order %d" % i))
            consumer.subscribe(topic)
            assert wait_until(lambda: bool(consumer.poll(1.0, max_messages=2)), 30.0), "the group read nothing"
            consumer.commit()
            exported = exported_metric_names(port)  # while both are connected
    missing = {where: sorted(names - exported) for where, names in queried.items() if names - exported}
    assert not missing, f"metrics the broker does not export: {missing}"
