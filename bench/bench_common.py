"""What every benchmark here shares: where temp stores go and the machine facts printed with results."""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
from datetime import datetime, UTC
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def bench_root() -> Path:
    """A parent for temp dirs on the repository's disk (the system tmp if it is that disk)."""
    system_tmp = Path(tempfile.gettempdir())
    if os.stat(system_tmp).st_dev == os.stat(REPO).st_dev:
        return system_tmp
    local = REPO / ".bench-tmp"
    local.mkdir(exist_ok=True)
    return local


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def commit() -> str:
    """The short HEAD commit, marked when the work tree has uncommitted changes."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
    return head + (" + uncommitted changes" if dirty.strip() else "")


def machine() -> dict[str, str]:
    """Date, CPU, cores, Python, platform, commit and load average, for the results' header."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu, "nproc": str(os.cpu_count()),
            "python": platform.python_version(), "platform": platform.platform(), "commit": commit(),
            "tmp_dir": str(bench_root()), "loadavg_at_start": loadavg()}


def short_frame(frame: str, line_too: bool = False) -> str:
    """A py-spy frame ``"func (path/to/file.py:12)"`` as ``"func (to/file.py:12)"``, or without the line."""
    function, _, location = frame.rpartition(" (")
    path, _, number = location.rstrip(")").rpartition(":")
    short = "/".join(path.split("/")[-2:])
    return f"{function} ({short}:{number})" if line_too else f"{function} ({short})"
