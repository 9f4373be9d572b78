"""What importing the source costs Spark's per-query Python runner (issue 9, the per-query start).

Spark starts ``python -m pyspark.sql.streaming.python_streaming_source_runner`` afresh for every
streaming query of a Python data source, with ``$SPARK_HOME/python/lib/pyspark.zip`` first on its
path; unpickling the data source then imports ``sparkmq.source``. This runs exactly that in fresh
interpreters (pyspark from the zip, the repo after it) and times the source's import alone
(the importing thread's CPU, and wall), interleaving the repos given, so a base checkout and another
are measured in the same minutes. Two conditions: ``cached`` (the package's bytecode compiled once, as a pip
install leaves it; kept under a temporary PYTHONPYCACHEPREFIX, the repos are not written) and
``source`` (no bytecode: an editable install run with PYTHONDONTWRITEBYTECODE=1, as development
checkouts often are, compiles every module in every runner).

With ``--driver-calls`` it also starts a NameServer and broker (``sparkmq dev``), fills a 4-queue
topic, and times what the runner then does for a 4-trigger query of a fresh consumer group:
``initialOffset``, and per trigger ``latestOffset`` + ``partitions`` + ``commit``.

CPU is the main thread's (``time.thread_time``): the runner's numpy starts an OpenBLAS thread that
spins for some 30-50 ms of CPU after its import (gone with ``OPENBLAS_NUM_THREADS=1``), and the
process's CPU would count it with whatever sparkmq imported meanwhile.

    python bench/spark_runner_import_bench.py                        # this repo, 9 rounds
    python bench/spark_runner_import_bench.py --repo /path/to/base --repo . --rounds 9 --driver-calls
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBE = """
import json, sys, time
import pyspark.sql.streaming.python_streaming_source_runner
before = set(sys.modules)
wall, cpu = time.perf_counter(), time.thread_time()
import sparkmq.source
wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
added = sorted(set(sys.modules) - before)
result = {"wall": wall, "cpu": cpu, "modules": len(added),
          "asyncio": "asyncio" in sys.modules, "instance": "sparkmq.client.instance" in sys.modules}
if len(sys.argv) > 1:  # namesrv, topic, group: the driver side of a 4-trigger query
    namesrv, topic, group = sys.argv[1:4]
    wall, cpu = time.perf_counter(), time.thread_time()
    options = {"namesrvaddr": namesrv, "topic": topic, "consumergroup": group,
               "startingoffsets": "earliest", "maxoffsetspertrigger": "250"}
    reader = sparkmq.source.SparkmqDataSource(options).streamReader(None)
    start = reader.initialOffset()
    limit = reader.getDefaultReadLimit()
    for _ in range(4):
        end = reader.latestOffset(start, limit)
        reader.partitions(start, end)
        reader.commit(end)
        start = end
    result["calls_wall"], result["calls_cpu"] = time.perf_counter() - wall, time.thread_time() - cpu
    result["asyncio_after_calls"] = "asyncio" in sys.modules
print(json.dumps(result))
"""


def spark_python_path() -> list[str]:
    """The runner's own path entries (``PythonUtils.sparkPythonPath``): pyspark.zip and py4j's zip."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return [str(lib / "pyspark.zip"), *sorted(str(p) for p in lib.glob("py4j-*-src.zip"))]


def probe(repo: Path, cache: Path, compiled: bool, driver: list[str]) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*spark_python_path(), str(repo)]))
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    if compiled:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [sys.executable, "-P", "-c", PROBE, *driver]  # -P: the working directory does not come first
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", action="append", type=Path, help="a checkout to import from (repeatable)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--driver-calls", action="store_true", help="also time a query's driver-side calls")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        driver: list[str] = []
        if args.driver_calls:
            driver = [*stack.enter_context(filled_topic()), ""]
        return measure(args, driver)


@contextlib.contextmanager
def filled_topic() -> Iterator[tuple[str, str]]:
    """A ``sparkmq dev`` NameServer + broker and a topic of 4 queues with 1,000 messages in them."""
    sys.path.insert(0, str(REPO / "bench"))
    sys.path.insert(0, str(REPO))
    import sparkmq
    from bench_common import DevProcess

    with tempfile.TemporaryDirectory() as store:
        dev = DevProcess(Path(store))
        try:
            with sparkmq.Producer("PID_runner_bench", dev.namesrv) as producer:
                for _i in range(1000):
                    producer.send(sparkmq.Message("RunnerBench", b"x" * 100))
            yield dev.namesrv, "RunnerBench"
        finally:
            dev.stop()


def measure(args: argparse.Namespace, driver: list[str]) -> int:
    repos = [r.resolve() for r in args.repo or [REPO]]
    conditions = [(repo, compiled) for repo in repos for compiled in (True, False)]
    samples: dict[tuple[Path, bool], list[dict[str, float]]] = {c: [] for c in conditions}
    with tempfile.TemporaryDirectory() as scratch:
        caches = {repo: Path(scratch, f"cached-{i}") for i, repo in enumerate(repos)}
        groups = itertools.count()

        def group() -> list[str]:  # a fresh consumer group per probe, as each bench query has
            return [*driver[:2], f"runner-bench-{next(groups)}"] if driver else []

        for repo in repos:
            probe(repo, caches[repo], True, group())  # writes the bytecode once, outside the timed rounds
        for _ in range(args.rounds):
            for repo, compiled in conditions:
                cache = caches[repo] if compiled else Path(scratch, "none")
                samples[repo, compiled].append(probe(repo, cache, compiled, group()))
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; {args.rounds} rounds, interleaved")
    for (repo, compiled), runs in samples.items():
        cpu = [r["cpu"] * 1000 for r in runs]
        wall = [r["wall"] * 1000 for r in runs]
        print(
            f"{repo} ({'cached' if compiled else 'source'}): import sparkmq.source after the runner's imports: "
            f"CPU ms median {statistics.median(cpu):.0f} "
            f"(best {min(cpu):.0f}), wall ms median {statistics.median(wall):.0f} (best {min(wall):.0f}); "
            f"{runs[0]['modules']:.0f} modules; asyncio loaded: {bool(runs[0]['asyncio'])}, "
            f"client instance loaded: {bool(runs[0]['instance'])}"
        )
        if driver:
            calls_cpu = [r["calls_cpu"] * 1000 for r in runs]
            calls_wall = [r["calls_wall"] * 1000 for r in runs]
            print(
                f"    driver-side calls of a 4-trigger query: CPU ms median {statistics.median(calls_cpu):.0f} "
                f"(best {min(calls_cpu):.0f}), wall ms median {statistics.median(calls_wall):.0f} "
                f"(best {min(calls_wall):.0f}); asyncio loaded by then: {bool(runs[0]['asyncio_after_calls'])}"
            )
            both_cpu = [(r["cpu"] + r["calls_cpu"]) * 1000 for r in runs]
            both_wall = [(r["wall"] + r["calls_wall"]) * 1000 for r in runs]
            print(  # a module imported on the first call instead moves its cost, it does not save it
                f"    import + driver-side calls: CPU ms median {statistics.median(both_cpu):.0f} "
                f"(best {min(both_cpu):.0f}), wall ms median {statistics.median(both_wall):.0f} "
                f"(best {min(both_wall):.0f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
