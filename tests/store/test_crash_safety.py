"""Crash safety: a SYNC-flush writer process is SIGKILLed at random moments, round after round.

After each kill the reopened store must hold every acknowledged message, byte-equal and in
order, a ConsumeQueue consistent with the CommitLog, and no partial record anywhere. The
store directory is kept across rounds, so every round recovers what the previous one left
(and some rounds kill the next writer before anyone verified, or while it is recovering).
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkmq.message import StoredMessage
from sparkmq.store import MessageStore

_HERE = Path(__file__).parent
_REPO = _HERE.parent.parent
WRITER = _HERE / "crash_writer.py"


from support import store_checks as sc  # noqa: E402 - shared with crash_writer.py

SEED = 4_242
ROUNDS = 24
SEQS_PER_ROUND = 1_000_000  # round r writes batches r*1e6, r*1e6+1, ...
READY_TIMEOUT_S = 30.0


@functools.lru_cache(maxsize=8192)
def batch_of(seq: int) -> Any:
    """Batch ``seq`` of this test's seed (regenerating it is the slow part of verifying)."""
    return sc.expected_batch(SEED, seq)


@dataclass(frozen=True)
class Ack:
    queue_id: int
    first_queue_offset: int
    count: int
    seq: int


@dataclass
class Round:
    first_seq: int
    acks: list[Ack]
    ready: bool
    returncode: int


def _writer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), str(_REPO / "tests"), env.get("PYTHONPATH", "")) if p)
    env["PYTHONWARNINGS"] = "error"
    return env


def run_writer(root: Path, first_seq: int, kill_after_s: float, from_spawn: bool, err_path: Path) -> Round:
    """Start a writer, SIGKILL it ``kill_after_s`` after it is ready (or after the spawn)."""
    lines: list[bytes] = []
    ready = threading.Event()
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(root), str(SEED), str(first_seq)],
            stdout=subprocess.PIPE,
            stderr=err,
            env=_writer_env(),
            cwd=str(_REPO),
        )
    assert proc.stdout is not None

    def pump() -> None:
        for line in iter(proc.stdout.readline, b""):
            lines.append(line)
            if line.startswith(b"ready "):
                ready.set()

    reader = threading.Thread(target=pump, name="crash-writer-stdout", daemon=True)
    reader.start()
    try:
        if not from_spawn:
            assert ready.wait(READY_TIMEOUT_S), f"writer never became ready: {err_path.read_text()}"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=kill_after_s)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, f"writer ended by itself ({proc.returncode}): {err_path.read_text()}"
    acks = []
    for line in lines:
        if line.startswith(b"ack ") and line.endswith(b"\n"):
            queue_id, first, count, seq = map(int, line.split()[1:])
            acks.append(Ack(queue_id, first, count, seq))
    return Round(first_seq, acks, ready.is_set(), proc.returncode)


def verify_store(store: MessageStore, acks: list[Ack]) -> dict[tuple[str, int], list[StoredMessage]]:
    """Everything ``check_consistent`` asserts, plus: every record is a regenerable batch
    message, byte-equal; batches are whole except possibly the last one a writer started;
    every acknowledged batch sits at its acknowledged queue offsets."""
    queues = sc.check_consistent(store)
    assert set(queues) <= {(sc.TOPIC, q) for q in range(sc.QUEUES)}
    present: dict[int, list[int]] = {}
    for (_topic, queue_id), messages in queues.items():
        previous = (-1, -1)
        for message in messages:
            seq, index = sc.seq_of(message)
            expected = batch_of(seq)
            assert expected.queue_id == queue_id
            assert bytes(message.body) == expected.bodies[index], f"body of {seq}:{index} differs"
            assert message.properties_raw == expected.properties[index]
            assert (seq, index) > previous, f"queue {queue_id} out of order at {seq}:{index}"
            previous = (seq, index)
            present.setdefault(seq, []).append(index)
    by_round: dict[int, list[int]] = {}
    for seq in present:
        by_round.setdefault(seq // SEQS_PER_ROUND, []).append(seq)
    for seqs in by_round.values():
        seqs.sort()
        assert seqs == list(range(seqs[0], seqs[-1] + 1)), "a batch is missing between two stored ones"
        assert seqs[0] % SEQS_PER_ROUND == 0
        for seq in seqs:
            indexes = present[seq]
            assert indexes == list(range(len(indexes)))
            if seq != seqs[-1]:  # only the batch being written when the kill came may be partial
                assert len(indexes) == len(batch_of(seq).bodies), f"batch {seq} is partial"
    for ack in acks:
        messages = queues.get((sc.TOPIC, ack.queue_id), [])
        expected = batch_of(ack.seq)
        assert (ack.queue_id, ack.count) == (expected.queue_id, len(expected.bodies))
        got = messages[ack.first_queue_offset : ack.first_queue_offset + ack.count]
        assert [sc.seq_of(m) for m in got] == [(ack.seq, i) for i in range(ack.count)], f"acked batch {ack.seq} lost"
    return queues


def check_keys(store: MessageStore, acks: list[Ack], rng: random.Random, samples: int = 60) -> None:
    """A sample of acknowledged messages is found, exactly once, by UNIQ_KEY and by business key."""
    for ack in rng.sample(acks, min(samples, len(acks))):
        expected = batch_of(ack.seq)
        index = rng.randrange(ack.count)
        found = store.query_messages(sc.TOPIC, f"U{ack.seq:09d}{index:02d}", 32)
        assert [bytes(m.body) for m in found] == [expected.bodies[index]], f"UNIQ_KEY of {ack.seq}:{index}"
        by_key = store.query_messages(sc.TOPIC, f"k{ack.seq}_{index}", 32)
        assert [bytes(m.body) for m in by_key] == [expected.bodies[index]], f"KEYS of {ack.seq}:{index}"


def test_sigkilled_sync_writer_never_loses_acknowledged_messages(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rng = random.Random(SEED)
    acks: list[Ack] = []
    rounds_verified = 0
    # Whether the abort marker is on disk: a writer got past start() (which writes it), or the test
    # left it. None: a writer was killed during its start-up before it said ready, so whether its
    # start() had written the marker yet (the kill can land between that write and the "ready" line)
    # is unknown; recovery must be right either way, only the report's flag cannot be predicted.
    abort_marker: bool | None = False
    for number in range(ROUNDS):
        from_spawn = number % 4 == 3  # may land during interpreter start-up or recovery
        delay = rng.uniform(0.0, 0.4) if from_spawn else rng.uniform(0.05, 0.5)
        outcome = run_writer(root, number * SEQS_PER_ROUND, delay, from_spawn, tmp_path / f"writer-{number}.err")
        acks.extend(outcome.acks)
        if outcome.ready:
            abort_marker = True
        elif abort_marker is False:
            abort_marker = None
        if number != ROUNDS - 1 and rng.random() < 0.3:
            continue  # the next writer recovers straight from this crash
        store = MessageStore(sc.crash_config(root))
        report = store.start()
        try:
            if abort_marker is not None:
                assert report.last_exit_ok is not abort_marker
            verify_store(store, acks)
            rounds_verified += 1
        finally:
            store.close()
        abort_marker = rng.random() < 0.5
        if abort_marker:
            store.config.abort_path.touch()  # the next writer recovers as after a crash again
    assert len(acks) > ROUNDS * 10, f"too few acknowledged batches ({len(acks)}) to say anything"
    assert rounds_verified >= ROUNDS // 2

    # A killed store reopened, appended to, closed cleanly and reopened keeps everything.
    outcome = run_writer(root, ROUNDS * SEQS_PER_ROUND, 0.3, False, tmp_path / "writer-last.err")
    acks.extend(outcome.acks)
    store = MessageStore(sc.crash_config(root))
    report = store.start()
    try:
        assert not report.last_exit_ok
        verify_store(store, acks)
        first = (ROUNDS + 1) * SEQS_PER_ROUND
        for seq in range(first, first + 50):
            expected = batch_of(seq)
            result = store.put_messages(expected.batch())
            assert result.ok
            acks.append(Ack(expected.queue_id, result.queue_offset, len(expected.bodies), seq))
    finally:
        store.close()
    assert not store.config.abort_path.exists()
    store = MessageStore(sc.crash_config(root))
    report = store.start()
    try:
        assert report.last_exit_ok
        assert not report.torn_tail
        verify_store(store, acks)
        check_keys(store, acks, rng)
    finally:
        store.close()
