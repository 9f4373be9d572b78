"""py-spy for the benches: attach to a process for one case, and where its CPU goes per message."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

SPY_RATE = 500


def short_frame(frame: str, line_too: bool = False) -> str:
    """A py-spy frame ``"func (path/to/file.py:12)"`` as ``"func (to/file.py:12)"``, or without the line."""
    function, _, location = frame.rpartition(" (")
    path, _, number = location.rstrip(")").rpartition(":")
    short = "/".join(path.split("/")[-2:])
    return f"{function} ({short}:{number})" if line_too else f"{function} ({short})"


class Spy:
    """``py-spy record`` (non-blocking, raw collapsed stacks) attached to one process for one case."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        spy = Path(sys.executable).with_name("py-spy")
        self.process = subprocess.Popen(
            [
                str(spy),
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(SPY_RATE),
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# Leaf frames where a thread waits (not CPU), and where it is inside a socket syscall (its CPU is
# the process's *system* time, measured separately). Any other leaf is Python work: user time.
WAIT_LEAVES = ("EpollSelector.select", "Condition.wait", "Event.wait", "Thread.join", "Popen._wait")
SYSCALL_LEAVES = (
    "_SelectorSocketTransport.write ",
    "_SelectorSocketTransport._read_ready__data_received (asyncio/selector_events.py:995)",
    "socket.send",
    "MappedFile.flush",
    "IndexFile.flush",
    "StoreCheckpoint.flush",
)


def profile_summary(collapsed: Path, messages: int, cpu: tuple[float, float], top: int = 14) -> str:
    """Where one process's CPU goes, per message.

    py-spy's non-idle samples on this shared 2-vCPU VM also count time a thread was runnable
    but not running, so sampled µs overstate CPU. Each Python-side sample's share is therefore
    scaled to the process's measured *user* CPU per message ("≈ user µs/msg"); samples inside
    socket syscalls and msync are shown apart, beside the measured *system* CPU.
    """
    if not collapsed.exists():
        return f"(no profile written to {collapsed})"
    us_per_sample = 1e6 / SPY_RATE / messages
    user_us, sys_us = (x / messages * 1e6 for x in cpu)
    buckets: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    syscalls: Counter[str] = Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, n = stack.split(";"), int(count)
        leaf = frames[-1]
        if leaf.startswith(WAIT_LEAVES):
            buckets["waiting"] += n
            continue
        if leaf.startswith(SYSCALL_LEAVES):
            buckets["syscall"] += n
            caller = next((short_frame(f) for f in reversed(frames) if "sparkmq/" in f), "?")
            syscalls[f"{short_frame(leaf)} ← {caller}"] += n
            continue
        buckets["python"] += n
        own[short_frame(leaf, line_too=True)] += n
        for frame in {
            short_frame(f) for f in frames if "sparkmq/" in f and "sparkmq/cli" not in f and "__main__" not in f
        }:
            inclusive[frame] += n
    python = buckets["python"] or 1
    scale = user_us / python
    lines = [
        (
            f"measured CPU: user {user_us:.2f} + system {sys_us:.2f} µs/msg; sampled (wall, non-idle): Python "
            f"{buckets['python'] * us_per_sample:.2f}, in syscalls {buckets['syscall'] * us_per_sample:.2f}, "
            f"waiting {buckets['waiting'] * us_per_sample:.2f} µs/msg"
        )
    ]
    lines.append("self time, Python (≈ user µs/msg | share):")
    lines += [f"  {n * scale:8.2f} | {100 * n / python:4.1f}%  {f}" for f, n in own.most_common(top)]
    lines.append("inclusive, sparkmq functions, Python part (≈ user µs/msg | share):")
    lines += [f"  {n * scale:8.2f} | {100 * n / python:4.1f}%  {f}" for f, n in inclusive.most_common(top)]
    if syscalls:
        lines.append("syscall samples (sampled µs/msg, ← nearest sparkmq caller):")
        lines += [f"  {n * us_per_sample:8.2f}  {f}" for f, n in syscalls.most_common(5)]
    return "\n".join(lines)
