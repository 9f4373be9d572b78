"""``sparkmq doctor``: what this machine gives sparkmq, one line a check.

Checks Python, Java (Spark needs a JDK 17 or newer), the native extensions (built, and whether
``SPARKMQ_NATIVE=0`` turns them off), the default ports, the store's disk and the clock. Each line
reads ``ok``, ``warn`` or ``fail``, the check's name and what was found; the exit code is 1 when any
check fails, else 0. Example::

    $ sparkmq doctor
    ok    python   3.11.7
    ok    java     openjdk 17.0.15 (Spark's connector needs 17 or newer)
    ok    native   4 extensions built, in use (SPARKMQ_NATIVE=0 turns them off)
    ok    port     9876 (NameServer) free
    ...
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import importlib.machinery
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import sparkmq

MIN_PYTHON = (3, 11)
MIN_JAVA = 17
#: The store is refused writes at broker.conf's diskMaxUsedSpaceRatio (75 % by default).
DISK_WARN_RATIO = 0.75
DISK_MIN_FREE = 1 << 30
DEFAULT_PORTS = {9876: "NameServer", 10911: "broker", 10909: "broker VIP channel", 10912: "broker HA"}
TIME_ERROR = 5  # adjtimex's answer while the kernel clock is not synchronised


@dataclass(frozen=True)
class Finding:
    level: str  # ok, warn or fail
    check: str
    detail: str

    def line(self) -> str:
        return f"{self.level:<5} {self.check:<8} {self.detail}"


def register(parser: argparse.ArgumentParser) -> None:
    """Add the ``doctor`` subcommand's options to its ``parser``."""
    parser.add_argument("--store-dir", type=Path, default=Path("data/store"), help="the store to check the disk of")
    parser.add_argument(
        "--port", type=int, action="append", dest="ports", metavar="PORT", help="a port to check (default: 9876 ...)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    ports = {port: "asked" for port in args.ports} if args.ports else DEFAULT_PORTS
    findings = [python_check(), java_check(), native_check(), *port_checks(ports), disk_check(args.store_dir)]
    findings.append(clock_check())
    for finding in findings:
        sys.stdout.write(finding.line() + "\n")
    return 1 if any(finding.level == "fail" for finding in findings) else 0


def python_check() -> Finding:
    version = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info[:2] >= MIN_PYTHON
    return Finding("ok" if ok else "fail", "python", version if ok else f"{version}: sparkmq needs 3.11 or newer")


def java_check() -> Finding:
    java = shutil.which("java")
    if java is None:
        return Finding("warn", "java", "no java on PATH: the Spark connector needs a JDK 17 or newer")
    shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    first = (shown.stderr or shown.stdout).splitlines()[0] if (shown.stderr or shown.stdout) else ""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', first)
    major = int(match.group(1)) if match else 0
    major = int(match.group(2) or 0) if major == 1 and match else major  # "1.8.0" is Java 8
    name = first.split(" version")[0]
    if major >= MIN_JAVA:
        return Finding("ok", "java", f"{name} {major} at {java} (Spark's connector needs {MIN_JAVA} or newer)")
    return Finding("warn", "java", f"{first or java}: the Spark connector needs Java {MIN_JAVA} or newer")


def native_extensions() -> list[str]:
    """The compiled extension modules inside the installed package (found on disk, not imported)."""
    root = Path(sparkmq.__file__).parent
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = []
    for path in sorted(root.rglob("_*.so")):
        if path.name.endswith(suffixes):
            relative = path.relative_to(root.parent).with_name(path.name.split(".")[0])
            found.append(".".join(relative.parts))
    return found


def native_check() -> Finding:
    built = native_extensions()
    off = os.environ.get("SPARKMQ_NATIVE", "1") == "0"
    if not built:
        return Finding("warn", "native", "no extension built (no C compiler at install): pure-Python paths serve all")
    state = "switched off by SPARKMQ_NATIVE=0" if off else "in use (SPARKMQ_NATIVE=0 turns them off)"
    return Finding("ok", "native", f"{len(built)} extensions built, {state}: {', '.join(built)}")


def port_checks(ports: dict[int, str]) -> list[Finding]:
    findings = []
    for port, role in ports.items():
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("0.0.0.0", port))
            except OSError as exc:
                findings.append(Finding("warn", "port", f"{port} ({role}) in use: {exc.strerror}"))
                continue
        findings.append(Finding("ok", "port", f"{port} ({role}) free"))
    return findings


def disk_check(store_dir: Path) -> Finding:
    probe = store_dir
    while not probe.exists():
        probe = probe.parent if probe.parent != probe else Path(".")
    usage = shutil.disk_usage(probe)
    used, free_gib = 1 - usage.free / usage.total, usage.free / (1 << 30)
    detail = f"{store_dir}: {free_gib:.1f} GiB free, {used:.0%} used"
    if usage.free < DISK_MIN_FREE:
        return Finding("fail", "disk", f"{detail}: under 1 GiB free, the broker cannot preallocate its files")
    if used >= DISK_WARN_RATIO:
        return Finding("warn", "disk", f"{detail}: at diskMaxUsedSpaceRatio's default (75 %) writes are refused")
    return Finding("ok", "disk", detail)


def clock_check() -> Finding:
    """The kernel's own word on NTP synchronisation (adjtimex), which store timestamps depend on."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None or not sys.platform.startswith("linux"):
        return Finding("warn", "clock", "cannot ask the kernel whether the clock is synchronised")
    timex = ctypes.create_string_buffer(512)  # struct timex; modes = 0 only reads
    state = ctypes.CDLL(libc_name, use_errno=True).adjtimex(timex)
    if state == TIME_ERROR:
        return Finding("warn", "clock", "not synchronised (no NTP): store timestamps of different hosts may disagree")
    if state < 0:
        return Finding("warn", "clock", f"adjtimex failed: {os.strerror(ctypes.get_errno())}")
    return Finding("ok", "clock", "synchronised")
