"""The dependency direction of the layers (errors, message, protocol at the bottom; cli on top), checked with ``ast``.

Each sparkmq component has a contract: which other sparkmq components it may import, which
third-party top-level packages, and which modules never. Every ``import``, ``from ... import``
(relative ones resolved), ``importlib.import_module("...")`` and ``__import__("...")`` is
checked, wherever it sits in the file (function bodies and ``TYPE_CHECKING`` blocks too).
Violations are reported as ``path:line``.

The allowlists of the pure layers are closed (errors, message and protocol only reach each
other), so checking direct imports also rules out indirect ones. import-linter's ``forbidden``
contracts are denylists that fail on modules which do not exist yet, so they cannot say
"the standard library only"; hence this checker.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "sparkmq"
STDLIB_MODULES = frozenset(sys.stdlib_module_names) | {"__future__"}
# The store never touches the network nor asyncio; nor do the pure layers.
NETWORK_MODULES = frozenset(
    {"asyncio", "selectors", "socket", "socketserver", "ssl", "http", "urllib", "xmlrpc", "ftplib", "smtplib"}
)
SPARK_MODULES = frozenset({"pyspark", "pyarrow", "delta", "deltalake"})


@dataclass(frozen=True)
class Contract:
    """What one sparkmq component (``sparkmq.<name>``) may import.

    ``internal``: the other sparkmq components it may import (``None``: any not forbidden).
    ``third_party``: allowed top-level third-party packages (``None``: any not forbidden).
    ``forbidden``: stdlib/third-party top-level names or sparkmq components never allowed.
    """

    component: str
    internal: frozenset[str] | None
    third_party: frozenset[str] | None
    forbidden: frozenset[str] = frozenset()


def _names(*names: str) -> frozenset[str]:
    return frozenset(f"{ROOT_PACKAGE}.{name}" for name in names)


CONTRACTS = (
    Contract("sparkmq.errors", _names(), frozenset(), NETWORK_MODULES),
    # native: the optional C codec of SEND_BATCH bodies (message/batch.py; the Python is the reference)
    Contract("sparkmq.message", _names("protocol", "errors", "native"), frozenset({"numpy"}), NETWORK_MODULES),
    # msgspec: the optional accelerated header codec (protocol/plain_header.py; json is the reference)
    Contract("sparkmq.protocol", _names("message", "errors"), frozenset({"msgspec"}), NETWORK_MODULES),
    # native: the optional C read of a queue (store/reads.py; the numpy path is the reference)
    Contract("sparkmq.store", _names("message", "errors", "native"), frozenset({"numpy"}), NETWORK_MODULES),
    Contract("sparkmq.offsets", _names("errors", "config_file", "protocol"), frozenset(), NETWORK_MODULES),
    Contract("sparkmq.config_file", _names("errors"), frozenset(), NETWORK_MODULES),
    # Optional C accelerators (docs/native.md): the standard library and their own package only.
    Contract("sparkmq.native", _names(), frozenset(), NETWORK_MODULES),
    # Packages still to come; their contracts apply as soon as their folder or file exists.
    # native: the optional C split of a read's plain answers and render of a send frame (the Python is the reference)
    Contract("sparkmq.remoting", _names("protocol", "errors", "native"), None, SPARK_MODULES),
    Contract("sparkmq.client", _names("protocol", "remoting", "message", "errors", "native"), None, SPARK_MODULES),
    Contract("sparkmq.broker", None, None, _names("client", "source", "sink", "cli") | SPARK_MODULES),
    Contract("sparkmq.namesrv", None, None, _names("client", "source", "sink", "cli") | SPARK_MODULES),
    # The Spark side: connector/ holds what source and sink share (options, offsets, Arrow path).
    # native: the store's C gather, for short-circuit reads of a broker's files (connector/local_reads.py)
    Contract("sparkmq.connector", _names("client", "message", "protocol", "errors", "native"), None),
    Contract("sparkmq.source", _names("client", "connector", "message", "errors", "sink", "tables"), None),
    Contract("sparkmq.sink", _names("client", "connector", "message", "errors"), None),
    # RocketMQ 5's controller: composed by the NameServer (embedded) or the CLI (standalone); talks to
    # brokers over the wire only, so it never imports broker, namesrv or client code; several nodes
    # replicate through pysyncobj's Raft.
    Contract(
        "sparkmq.controller",
        _names("protocol", "remoting", "errors", "config_file"),
        frozenset({"pysyncobj"}),
        _names("broker", "namesrv", "client", "store") | SPARK_MODULES,
    ),
    # Topics as Delta tables: read from the store, written with deltalake; the broker composes it.
    Contract("sparkmq.tables", _names("store", "message", "errors", "connector", "config_file", "native"), None),
    # Operator tools (the dashboard) build on the client like any application would.
    Contract("sparkmq.ops", _names("client", "protocol", "message", "errors"), None, SPARK_MODULES),
)
# The command line is a composition root: it may import anything (as may sparkmq/__init__.py).
UNCONSTRAINED = _names("cli", "embedded")


@dataclass(frozen=True)
class Violation:
    """One import that breaks a contract, located by file and line."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def module_name_of(path: Path, source_root: Path) -> str:
    """``sparkmq/store/commitlog.py`` → ``sparkmq.store.commitlog``; an ``__init__`` → its package."""
    parts = list(path.relative_to(source_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve_relative(module: str | None, level: int, importer: str, importer_is_package: bool) -> str:
    """Turn ``from ..x import y`` inside ``importer`` into the absolute ``x``'s dotted name."""
    if level == 0:
        return module or ""
    package_parts = importer.split(".") if importer_is_package else importer.split(".")[:-1]
    base = package_parts[: len(package_parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(tree: ast.AST, importer: str, importer_is_package: bool) -> Iterator[tuple[int, str]]:
    """Yield ``(line, dotted module name)`` for every import in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = resolve_relative(node.module, node.level, importer, importer_is_package)
            if base == ROOT_PACKAGE:
                # `from sparkmq import errors` names a submodule; `from sparkmq import X` the facade.
                for alias in node.names:
                    yield node.lineno, f"{base}.{alias.name}"
            else:
                yield node.lineno, base
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in {"__import__", "import_module"}
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def component_of(module: str) -> str:
    """``sparkmq.store.commitlog`` → ``sparkmq.store``; ``sparkmq`` → ``sparkmq``."""
    return ".".join(module.split(".")[:2])


def judge(contract: Contract, target: str) -> str | None:
    """Return why importing ``target`` breaks ``contract``, or ``None`` when it is allowed."""
    top = target.split(".")[0]
    if top == ROOT_PACKAGE:
        component = component_of(target)
        if component == contract.component:
            return None
        if component == ROOT_PACKAGE or component in contract.forbidden:
            return f"{contract.component} must not import {target}"
        if contract.internal is not None and component not in contract.internal:
            allowed = ", ".join(sorted(contract.internal)) or "no other sparkmq package"
            return f"{contract.component} imports {target}; it may import only {allowed}"
        return None
    if top in contract.forbidden:
        return f"{contract.component} must not import {top}"
    if top in STDLIB_MODULES:
        return None
    if contract.third_party is not None and top not in contract.third_party:
        allowed = ", ".join(sorted(contract.third_party)) or "none"
        return f"{contract.component} imports third-party {top}; allowed third-party packages: {allowed}"
    return None


def source_files_of(component: str, source_root: Path) -> list[Path]:
    """The .py files of ``sparkmq.<name>``: a package folder's tree or a single module file."""
    relative = Path(*component.split("."))
    folder = source_root / relative
    if folder.is_dir():
        return sorted(folder.rglob("*.py"))
    module_file = folder.with_suffix(".py")
    return [module_file] if module_file.is_file() else []


def violations_of(contract: Contract, source_root: Path) -> list[Violation]:
    """Check every file of ``contract.component`` under ``source_root``."""
    found: list[Violation] = []
    for path in source_files_of(contract.component, source_root):
        importer = module_name_of(path, source_root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in imported_modules(tree, importer, path.name == "__init__.py"):
            reason = judge(contract, target)
            if reason is not None:
                found.append(Violation(path.relative_to(source_root), line, reason))
    return sorted(found, key=lambda violation: (str(violation.path), violation.line))


def component_exists(component: str, source_root: Path) -> bool:
    folder = source_root / Path(*component.split("."))
    return folder.is_dir() or folder.with_suffix(".py").is_file()


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda contract: contract.component)
def test_component_respects_its_dependency_contract(contract: Contract) -> None:
    if not component_exists(contract.component, REPO_ROOT):
        pytest.skip(f"{contract.component} does not exist yet")

    violations = violations_of(contract, REPO_ROOT)

    assert not violations, "dependency rule broken:\n" + "\n".join(map(str, violations))


def test_every_component_has_a_contract() -> None:
    covered = {contract.component for contract in CONTRACTS} | UNCONSTRAINED
    components = {
        component_of(module_name_of(path, REPO_ROOT))
        for path in (REPO_ROOT / ROOT_PACKAGE).rglob("*.py")
        if path.parent != REPO_ROOT / ROOT_PACKAGE or path.stem not in {"__init__", "__main__"}
    }

    assert components <= covered, f"add a Contract in tests/test_layering.py for: {sorted(components - covered)}"


def test_checker_reports_each_violation_with_file_and_line(tmp_path: Path) -> None:
    store = tmp_path / "sparkmq" / "store"
    store.mkdir(parents=True)
    (store / "__init__.py").write_text("from . import commitlog\n", encoding="utf-8")
    (store / "commitlog.py").write_text(
        "import os\n"
        "from sparkmq.message import record\n"
        "from ..errors import StoreError\n"
        "import numpy as np\n"
        "def serve():\n"
        "    import socket\n"
        "from .. import client\n"
        "import pyarrow\n"
        "from sparkmq import OffsetStoreError\n"
        "importlib.import_module('asyncio')\n",
        encoding="utf-8",
    )
    store_contract = next(contract for contract in CONTRACTS if contract.component == "sparkmq.store")

    reported = [str(violation) for violation in violations_of(store_contract, tmp_path)]

    commitlog = Path("sparkmq", "store", "commitlog.py")
    assert [line.split(": ", 1)[0] for line in reported] == [f"{commitlog}:{n}" for n in (6, 7, 8, 9, 10)]
    assert "must not import socket" in reported[0]
    assert "sparkmq.client" in reported[1]
    assert "third-party pyarrow" in reported[2]
    assert "imports sparkmq.OffsetStoreError; it may import only" in reported[3]
    assert "must not import asyncio" in reported[4]
