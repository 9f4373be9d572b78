"""The package root's public API: ``__all__`` is explicit, complete and importable."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sparkmq
import sparkmq.client
import sparkmq.errors
from sparkmq.cli.main import main


def test_all_names_exist_and_are_exported() -> None:
    missing = [name for name in sparkmq.__all__ if not hasattr(sparkmq, name)]

    assert not missing, f"sparkmq.__all__ names missing attributes: {missing}"
    assert len(set(sparkmq.__all__)) == len(sparkmq.__all__)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from sparkmq import *", namespace)

    assert set(namespace) - {"__builtins__"} == set(sparkmq.__all__)


def test_every_error_class_is_public_at_the_root() -> None:
    assert set(sparkmq.errors.__all__) <= set(sparkmq.__all__)
    for name in sparkmq.errors.__all__:
        assert getattr(sparkmq, name) is getattr(sparkmq.errors, name)


def test_version_is_a_string() -> None:
    assert isinstance(sparkmq.__version__, str) and sparkmq.__version__.count(".") == 2


def test_cli_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out == f"{sparkmq.__version__}\n"


def test_python_dash_m_sparkmq_version() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "sparkmq", "version"], capture_output=True, text=True, check=False, timeout=60
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == f"{sparkmq.__version__}\n"


def test_transaction_producer_api_is_public() -> None:
    for name in ("TransactionProducer", "AsyncTransactionProducer", "LocalTransactionState", "TransactionSendResult"):
        assert name in sparkmq.__all__ and getattr(sparkmq, name) is getattr(sparkmq.client, name)
    # the values are END_TRANSACTION's commitOrRollback codes
    assert {s.name: s.value for s in sparkmq.LocalTransactionState} == {"COMMIT": 8, "ROLLBACK": 12, "UNKNOWN": 0}
