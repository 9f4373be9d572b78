"""Client benchmark: sparkmq's own clients over loopback, beside the peers measured in the same run.

The driver of the split client benches: the send cases (``client_send_bench.py``) and the
consume cases (``client_consume_bench.py``) in one ``sparkmq dev`` run, plus the peers
(``client_peers.py``). ``client_scale_bench.py`` (queues, connections) and
``client_fanin_bench.py`` (many producer processes) run on their own.

Run from the repo root::

    .venv/bin/python bench/client_bench.py                 # sparkmq only, about 1.5 min
    .venv/bin/python bench/client_bench.py --quick         # smoke run, ~15 s
    .venv/bin/python bench/client_bench.py --with-peers    # + Redis Streams and NATS JetStream first, ~3.5 min
    .venv/bin/python bench/client_bench.py --profile DIR --latency-sends 10000   # + py-spy, broker and client

A real ``python -m sparkmq dev`` subprocess (NameServer + broker in one process, ASYNC flush,
production segment sizes, a temporary store on the repository's disk, removed afterwards) is
started; its addresses come from the ready line ``dev namesrv H:P broker H:P``. This ONE process
then measures with sparkmq's public clients, for 100 B and 1 KiB bodies (one deterministic
random body per size, as the peers' scripts use; the properties are what every producer adds,
``WAIT`` and ``UNIQ_KEY``; ``--tags-keys`` adds ``TAGS`` and ``KEYS``):

* ``send x1, 1 in flight``: ``AsyncProducer.send`` one after another; also the send latency;
* ``send x1, N in flight``: ``AsyncProducer.send`` pipelined (``--inflight``, 128);
* ``send_batch 32`` / ``send_batch 256``: ``AsyncProducer.send_batch``, 8 batches in flight;
* ``pull_raw``: ``AsyncPullConsumer.pull_raw`` of everything the batch-256 case wrote, its 4
  queues concurrently, ``maxMessages`` 4096 (the broker's cap), records counted with
  ``record_starts``: no per-message objects (the Spark path);
* ``poll``: ``AsyncPullConsumer.poll(max_messages=4096)`` of the same, every record decoded
  to a ``ReceivedMessage``, body bytes checked;
* ``ping``: ``GET_MAX_OFFSET`` through the consumer, one at a time: client + remoting + broker
  without the store's put;
* ``asyncio echo``: a bare asyncio echo server process, 100 B each way: the loopback and
  event-loop floor on this machine (the peers' ``phys_tcp.py echo``);
* ``Producer.send (blocking)``: the blocking facade, one at a time; latency.

Message objects are built before the clock starts; everything a client does per send (ids,
properties, encoding, routing, the response) is inside it. CPU columns are user + system
seconds per message: the dev process's from /proc (10 ms ticks), this process's from
getrusage (all its threads).

``--with-peers`` first runs ``../shared/peers/run_all.sh`` (``ONLY="versions redis nats"
REPS=1``, ``PEERS_OUT`` a temporary directory, the peers' virtualenv from ``setup.sh``), reads
its raw JSON lines and prints side-by-side tables: throughput ratios and CPU per message; then
(``--rounds``, default 3) nats-py raw and ``send_async`` in its shape alternately, a ratio per round and
their median, with both sides' CPU per message (``client_rounds.py``).
``--profile DIR`` attaches ``py-spy record --nonblocking`` to the broker and to this process
for each 100 B case and the ping, and prints where the CPU goes per message (see
``profile_summary``). Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench_common import (
    REPO,
    Recorder,
    loadavg,
    machine,
    print_machine,
    producer_and_consumer,
    recording,
    run_loop,
    table,
    temp_root,
)

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from bench_profile import SPY_RATE
from client_consume_bench import consume_cases
from client_peers import (
    add_peers_dir_argument,
    add_peers_python_argument,
    peers_table,
    run_peers,
    side_by_side,
    targets,
)
from client_rounds import NATS_COUNT, Round, interleaved_rounds, rounds_table
from client_send_bench import (
    SIZES,
    add_arguments,
    blocking_cases,
    floor_cases,
    send_cases,
    windowed,
)


async def async_cases(
    bench: Recorder, scale: int, inflight: int, n_latency: int, args: argparse.Namespace, root: Path
) -> list[Round]:
    """Per body size: the send cases, then ``pull_raw`` and ``poll`` of what send_batch 256 wrote; then the floors;
    with the peers, the interleaved rounds of nats-py raw and its shape last (``client_rounds.py``)."""
    async with producer_and_consumer(bench.dev.namesrv, "CLIENT_BENCH") as (producer, consumer):
        for size in SIZES:
            written = await send_cases(bench, producer, size, scale, inflight, n_latency)
            await consume_cases(bench, consumer, f"ClientBenchB256{size}", size, written)
        await floor_cases(bench, consumer, n_latency // scale)
        if not args.with_peers or args.rounds <= 0:
            return []
        window = args.rounds_inflight or inflight
        return await interleaved_rounds(
            bench,
            lambda messages: windowed(producer, messages, window),
            window,
            args.rounds,
            args.peers_python,
            args.peers_dir,
            root,
            NATS_COUNT // scale,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--with-peers", action="store_true", help="run the peers' run_all.sh first (ONLY=redis nats)")
    parser.add_argument("--peers-only", default="redis nats", help="the peers' ONLY (default: redis nats)")
    parser.add_argument("--peers-reps", type=int, default=1, help="the peers' REPS (default 1)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="with --with-peers: rounds of nats-py raw and sparkmq in its shape, alternately (default 3; 0: none)",
    )
    parser.add_argument(
        "--rounds-inflight",
        type=int,
        default=0,
        help="the rounds' send_async window (default: --inflight's; nats-py raw's own is 1000)",
    )
    add_peers_python_argument(parser)
    add_peers_dir_argument(parser)
    parser.add_argument("--json", type=Path, help="write every row and peer record here")
    args = parser.parse_args(argv)
    info = machine()
    info["load at start"] = loadavg()
    print(
        f"sparkmq client bench: {info['date']}, {info['cpu']} x {info['nproc']}, load {info['load at start']}",
        file=sys.stderr,
    )
    records: list[dict] = []
    versions = ""
    with temp_root("sparkmq-client-bench-") as root:
        if args.with_peers:
            print(f"peers: {args.peers_only} via {args.peers_dir / 'run_all.sh'} ...", file=sys.stderr, flush=True)
            try:
                records, versions = run_peers(
                    root / "peers",
                    args.peers_only,
                    args.peers_reps,
                    args.peers_python,
                    args.latency_sends // (10 if args.quick else 1),  # as many samples as our latency cases take
                    args.peers_dir,
                )
            except FileNotFoundError as exc:
                print(f"client_bench: {exc}", file=sys.stderr)
                return 2
            info["load after peers"] = loadavg()
        with recording(root, args.tags_keys, args.profile) as bench:
            scale = 10 if args.quick else 1
            rounds = run_loop(async_cases(bench, scale, args.inflight, args.latency_sends, args, root), args.loop)
            blocking_cases(bench, scale, args.latency_sends)
    print_machine(info)
    print("\n## sparkmq\n\n" + table(bench.rows))
    if records:
        print("\n## side by side (peers measured in this run)\n\n" + side_by_side(bench.rows, records))
        print("\n## peers, every record\n\n" + peers_table(records))
    print("\n## targets\n\n" + targets(bench.rows, records))
    if rounds:
        print("\n## nats-py raw and its shape, interleaved rounds (100 B)\n\n" + rounds_table(rounds))
    if bench.profiles:
        print(f"\n## profiles (py-spy, non-blocking, {SPY_RATE} Hz)\n\n" + "\n\n".join(bench.profiles))
    if versions:
        print("\n## peer versions\n\n```\n" + versions.rstrip() + "\n```")
    if args.json:
        rows = [
            dict(
                asdict(r),
                msgs_per_s=r.msgs_per_s,
                p50_us=r.pct(50) if r.latency_us else None,
                p99_us=r.pct(99) if r.latency_us else None,
                latency_us=None,
            )
            for r in bench.rows
        ]
        interleaved = [
            {"round": r.number, "nats": r.nats, "msgs_per_s": r.ours.msgs_per_s, "ratio": r.ratio,
             "broker_us": r.broker_us, "client_us": r.client_us, "load": r.load}
            for r in rounds
        ]  # fmt: skip
        args.json.write_text(
            json.dumps({"machine": info, "sparkmq": rows, "peers": records, "rounds": interleaved}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
