"""``cli.service.serve_until_signalled``: start, the garbage collector settled, ready line, close on a signal."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import weakref
from collections.abc import Iterator

import pytest

from sparkmq.cli.service import serve_until_signalled


class _Node:
    """A weak-referenceable object for reference cycles."""

    def __init__(self) -> None:
        self.other: _Node | None = None


class StartUp:
    """A service whose start keeps 5,000 objects and drops one reference cycle, as a broker's start does."""

    def __init__(self) -> None:
        self.kept: list[_Node] = []
        self.dropped: weakref.ref[_Node] | None = None
        self.frozen_when_ready = -1
        self.dropped_alive_when_ready = True
        self.closed = False

    async def start(self) -> None:
        self.kept = [_Node() for _ in range(5000)]
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # only the cycle collector frees these
        self.dropped = weakref.ref(a)

    def ready_line(self) -> str:
        self.frozen_when_ready = gc.get_freeze_count()
        assert self.dropped is not None
        self.dropped_alive_when_ready = self.dropped() is not None
        os.kill(os.getpid(), signal.SIGTERM)  # stops serve_until_signalled once it waits
        return "ready"

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()  # the rest of the test process collects as before


@pytest.mark.usefixtures("unfrozen")
def test_the_start_ups_garbage_is_collected_and_what_it_keeps_is_frozen_before_the_ready_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    service = StartUp()
    asyncio.run(serve_until_signalled(service, ready_line_of=service.ready_line))
    assert capsys.readouterr().out == "ready\n"
    assert not service.dropped_alive_when_ready  # collected first: a frozen cycle would never be freed
    assert service.frozen_when_ready >= len(service.kept)  # out of every later collection's traversal
    kept = weakref.ref(service.kept[0])
    service.kept.clear()
    assert kept() is None  # frozen objects are still freed by reference counting
    assert service.closed


# A pull lane's allocations per read, as in PullLane: four ~1 MiB answers, joined into one, then freed.
_ANSWERS_PATTERN = """
import resource, sys
from sparkmq.cli.service import keep_freed_memory
if sys.argv[1] == "set" and not keep_freed_memory():
    print("unset"); raise SystemExit
def read():
    frames = [bytes(1 << 20) for _ in range(4)]
    joined = b"".join(frames)
    del frames
    return len(joined)
for _ in range(20):
    read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    read()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", _ANSWERS_PATTERN, mode], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_keep_freed_memory_reuses_the_blocks_of_freed_answers() -> None:
    """After the warm-up, 200 reads of 8 MiB each fault in (almost) no fresh page: the heap is reused
    (glibc's defaults fault in ~1,000 pages per read here: a fresh mapping for each joined answer)."""
    faults = _page_faults("set")
    if faults == "unset":
        pytest.skip("not glibc: mallopt is not there")
    assert int(faults) < 200, faults  # each fresh 4 MiB join alone would be 1,024 faults


@pytest.mark.usefixtures("unfrozen")
def test_keep_freed_memory_is_called_when_a_service_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import sparkmq.cli.service as service_module

    calls: list[str] = []
    monkeypatch.setattr(service_module, "keep_freed_memory", lambda: calls.append("set") or True)
    service = StartUp()
    asyncio.run(serve_until_signalled(service, ready_line_of=service.ready_line))
    assert calls == ["set"] and service.closed
