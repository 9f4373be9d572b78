"""A broker process started by the tests loads the extensions the test process loads: under ``make native-check``
the sanitized build (PYTHONPATH), so the C a broker process runs is checked too (LD_PRELOAD and ASAN_OPTIONS
are inherited: its reports land beside the test process's)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from sparkmq import native
from sparkmq.message.properties import encode_properties
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient
from support.processes import BrokerProcess


def _sparkmq_extensions(maps: str) -> set[Path]:
    """The shared objects under a ``sparkmq`` package directory in a ``/proc/PID/maps`` text."""
    files = {line.split(maxsplit=5)[-1] for line in maps.splitlines() if line.count(" ") >= 5}
    return {Path(f).resolve() for f in files if f.endswith(".so") and "/sparkmq/" in f}


async def _send(address: str) -> int:
    """One SEND_MESSAGE_V2 as a Java producer writes it (the broker's native lane takes it)."""
    fields = {"a": "PID_NATIVE_BUILD", "b": "NativeBuild", "c": "TBW102", "d": "4", "e": "0", "f": "0"}
    fields |= {"g": str(int(time.time() * 1000)), "h": "0", "i": encode_properties({"WAIT": "true"}).decode()}
    fields |= {"j": "0", "k": "false", "m": "false"}
    client = RemotingClient()
    try:
        return (await client.invoke(address, RequestCode.SEND_MESSAGE_V2, fields, b"through the native lane")).code
    finally:
        await client.close()


def test_a_broker_process_runs_the_extension_build_of_the_tests(tmp_path: Path) -> None:
    if native.sendlane is None:
        pytest.skip("the native extensions are not built or SPARKMQ_NATIVE=0: nothing native to compare")
    ours = {
        Path(module.__file__).resolve()
        for name, module in list(sys.modules.items())
        if name.startswith("sparkmq.") and (getattr(module, "__file__", None) or "").endswith(".so")
    }
    with BrokerProcess.start(tmp_path, None) as broker:
        assert asyncio.run(_send(broker.address)) == ResponseCode.SUCCESS
        loaded = _sparkmq_extensions(Path(f"/proc/{broker.pid}/maps").read_text())
    assert Path(native.sendlane.__file__ or "").resolve() in loaded, sorted(loaded)
    assert loaded <= ours, f"the broker loaded other builds: {sorted(loaded - ours)}"
