"""What starting a service costs: ``python -m sparkmq namesrv|broker`` until its ready line, as the tests start them.

Run from the repo root::

    .venv/bin/python bench/cli_start_bench.py                        # this checkout, 7 starts of each
    .venv/bin/python bench/cli_start_bench.py --against ../other     # and another checkout, interleaved

Each start is a fresh process (``PYTHONPATH`` = the checkout, working directory a temporary one so only
that checkout is imported); it is timed from spawn to its ready line (wall) and its CPU read from
``/proc/PID/stat`` at that line, then it is stopped with SIGTERM. Medians are printed; on a shared
machine compare checkouts within one run.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import CLOCK_TICKS, REPO, machine  # noqa: E402 - bench/ is sys.path[0]

SERVICES = {"namesrv": ["namesrv", "--port", "0"], "broker": ["broker", "--port", "0", "--store-dir"]}


def start_once(checkout: Path, args: list[str], workdir: Path) -> tuple[float, float]:
    """(wall s, CPU s) from spawn to the ready line."""
    env = dict(os.environ, PYTHONPATH=str(checkout), SPARKMQ_EVENT_LOOP="auto")
    began = time.perf_counter()
    command = [sys.executable, "-m", "sparkmq", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=workdir, env=env)
    assert process.stdout is not None
    line = process.stdout.readline()
    wall = time.perf_counter() - began
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
    process.send_signal(signal.SIGTERM)
    process.wait(30)
    process.stdout.close()
    if b"listening on" not in line:
        raise SystemExit(f"{args[0]} from {checkout} did not start: {line!r}")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--starts", type=int, default=7)
    parser.add_argument("--against", type=Path, action="append", default=[], help="another checkout to compare")
    args = parser.parse_args()
    print(" ".join(f"{k}={v}" for k, v in machine().items()))
    checkouts = [REPO, *(path.resolve() for path in args.against)]
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        for name, service in SERVICES.items():
            runs: dict[Path, list[tuple[float, float]]] = {checkout: [] for checkout in checkouts}
            for i in range(args.starts):
                for checkout in checkouts:  # interleaved: load on the machine hits every checkout alike
                    store = [str(workdir / f"store-{i}-{len(runs[checkout])}")] if name == "broker" else []
                    runs[checkout].append(start_once(checkout, service + store, workdir))
            for checkout, samples in runs.items():
                wall = statistics.median(s[0] for s in samples)
                cpu = statistics.median(s[1] for s in samples)
                print(f"{name:8} {checkout}: ready in {wall:.2f} s wall, {cpu:.2f} s CPU (medians of {len(samples)})")


if __name__ == "__main__":
    main()
