"""The C extension is built where the tests run (so CI cannot silently fall back to Python),
the ``SPARKMQ_NATIVE=0`` switch turns it off, and it keeps no memory it was given."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

from sparkmq import native
from sparkmq.message.layout import MESSAGE_MAGIC_CODE
from support.native_lane import BORN, MAX_FRAME, MAX_MESSAGE, STORE, send_frame

REPO = Path(__file__).resolve().parents[2]


def test_the_extension_is_built_here() -> None:
    assert native.BUILT, (
        "sparkmq.native._sendlane is missing: run `pip install -e .` or `python setup.py build_ext --inplace`"
    )


def test_sparkmq_native_0_forces_the_python_paths() -> None:
    probe = "from sparkmq import native; print(native.BUILT, native.ENABLED, native.sendlane is None)"
    for value, expected in (("0", "True False True"), ("1", "True True False")):
        env = {**os.environ, "SPARKMQ_NATIVE": value, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True, check=True
        )
        assert out.stdout.split() == expected.split()


def _rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_repeated_calls_keep_memory_flat() -> None:
    """100,000 scans (with place, dispatch and responses on every tenth) and queue reads leave RSS
    where it was."""
    from sparkmq.broker.processors.send_lane import response_template
    from sparkmq.native import _sendlane

    parts = response_template("R", True)
    assert parts is not None
    frames = [
        send_frame(i, queue_id=str(i % 4), properties=f"UNIQ_KEY\x01U{i}\x02KEYS\x01a b\x02TAGS\x01t") for i in range(8)
    ]
    buffer = bytearray(b"".join(frames))
    args = (MAX_FRAME, MAX_MESSAGE, BORN.ip, BORN.port, STORE.ip, STORE.port)

    from sparkmq.broker.processors.pull_lane import pull_template
    from sparkmq.native import _queueread

    pull_parts = pull_template()
    assert pull_parts is not None

    # 32 records of 100 bytes back to back (heads as their units name them), over two segments
    segment = memoryview(
        b"".join(struct.pack(">iiiiiqq", 100, MESSAGE_MAGIC_CODE, 0, 0, 0, k, 100 * k).ljust(100) for k in range(32))
    )
    segments = ((0, segment[:1600], 1600), (1600, segment[1600:], 1600))
    units = b"".join((100 * k).to_bytes(8) + (100).to_bytes(4) + (k % 3).to_bytes(8) for k in range(32))

    def run(times: int) -> None:
        for i in range(times):
            read = _queueread.gather(units, 0, 0, None if i % 2 else [1, 2], 32, 1 << 20, segments, 0)
            assert isinstance(read, tuple) and read[2] in (32, 21)
            framed = _queueread.gather_frame(units, 0, 0, None, 32, 1 << 20, segments, 0, pull_parts, i, 0, 1, 9, 0, 32)
            assert isinstance(framed, tuple) and framed[1] == 32
            out = bytearray()
            for _frame in range(3):  # the pull lane's one buffer per call, grown from empty
                appended = _queueread.gather_frame(
                    units, 0, 0, None, 32, 1 << 20, segments, 0, pull_parts, i, 0, 1, 9, 0, 32, out, i % 3000
                )
                assert appended[0] == len(out)
            group = _sendlane.scan(buffer, 0, 1024, *args)
            assert group is not None
            if i % 10 == 0:
                group.place(4096, 1, [0] * len(group.keys))
                group.queue_units(), group.index_entries()
                group.responses(parts, STORE.ip, STORE.port)
                group.keys, group.topics, group.key_counts, group.first_refused([8])

    run(10_000)
    before = _rss_kib()
    run(100_000)
    assert _rss_kib() - before < 2048, "RSS grew by more than 2 MiB over 100,000 calls"
