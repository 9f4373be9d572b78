"""The C extensions are built where the tests run (so CI cannot silently fall back to Python),
the ``SPARKMQ_NATIVE=0`` switch turns every one off, and they keep no memory they were given."""

from __future__ import annotations

import ast
import importlib
import os
import struct
import subprocess
import sys
from pathlib import Path

from sparkmq import native
from sparkmq.message.layout import MESSAGE_MAGIC_CODE
from support.native_lane import BORN, MAX_FRAME, MAX_MESSAGE, STORE, send_frame

REPO = Path(__file__).resolve().parents[1]


def setup_extensions() -> list[str]:
    """The dotted names of the extensions setup.py builds (the first argument of each ``optional_c``)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
    names = [call.args[0].value for call in calls if call.func.id == "optional_c"]  # type: ignore[attr-defined]
    assert names and all(isinstance(name, str) for name in names)
    return sorted(names)


# Imports every Python module of the package (the CLI's __main__ aside) and prints the extensions then loaded.
_LOADED_PROBE = """
import importlib, pkgutil, sys, sparkmq
for module in pkgutil.walk_packages(sparkmq.__path__, "sparkmq."):
    if not module.name.endswith("__main__") and module.name not in sys.argv[1:]:
        importlib.import_module(module.name)
print(" ".join(sorted(name for name in sys.argv[1:] if name in sys.modules)))
"""


def _loaded_with(switch: str, names: list[str]) -> list[str]:
    env = {**os.environ, "SPARKMQ_NATIVE": switch, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", _LOADED_PROBE, *names], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_every_extension_is_built_here() -> None:
    for name in setup_extensions():
        assert native.built(name), f"{name} is missing: run `pip install -e .` or `python setup.py build_ext --inplace`"
        importlib.import_module(name)


def test_sparkmq_native_0_keeps_every_extension_unloaded() -> None:
    """With the switch off, importing the whole package loads none of the extensions setup.py builds
    (each goes through ``sparkmq.native.extension``); with it on, the same imports load every one."""
    names = setup_extensions()
    assert _loaded_with("0", names) == []
    assert _loaded_with("1", names) == names


def test_no_module_imports_an_extension_but_through_the_switch() -> None:
    """Outside ``TYPE_CHECKING``, no module of the package names an extension in an import statement
    (a lazy import in a function would bypass the switch unseen by the probe above)."""
    names = set(setup_extensions())
    offenders = []
    for path in sorted((REPO / "sparkmq").rglob("*.py")):
        tree = ast.parse(path.read_text())
        typing_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
            for statement in block.body
            for node in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                imported = {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported = {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            else:
                continue
            offenders += [f"{path.relative_to(REPO)}:{node.lineno} {name}" for name in sorted(imported & names)]
    assert offenders == [], "import these through sparkmq.native.extension:\n" + "\n".join(offenders)


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
        b"".join(
            # a body of 9 bytes, an empty topic and no properties: the lengths fill the 100 bytes
            (struct.pack(">iiiiiqq", 100, MESSAGE_MAGIC_CODE, 0, 0, 0, k, 100 * k) + bytes(48) + (9).to_bytes(4))
            + bytes(12)
            for k in range(32)
        )
    )
    segments = ((0, segment[:1600], 1600), (1600, segment[1600:], 1600))
    units = b"".join((100 * k).to_bytes(8) + (100).to_bytes(4) + (k % 3).to_bytes(8) for k in range(32))

    def run(times: int) -> None:
        for i in range(times):
            read = _queueread.gather(units, 0, 0, None if i % 2 else [1, 2], 32, 1 << 20, segments, 0, b"")
            assert isinstance(read, tuple) and read[2] in (32, 21)
            framed = _queueread.gather_frame(
                units, 0, 0, None, 32, 1 << 20, segments, 0, b"", pull_parts, i, 0, 1, 9, 0, 32
            )
            assert isinstance(framed, tuple) and framed[1] == 32
            out = bytearray()
            for _frame in range(3):  # the pull lane's one buffer per call, grown from empty
                appended = _queueread.gather_frame(
                    units, 0, 0, None, 32, 1 << 20, segments, 0, b"", pull_parts, i, 0, 1, 9, 0, 32, out, i % 3000
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
