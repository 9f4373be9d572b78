"""The examples in sparkmq.offsets' docstrings run and hold."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

import sparkmq.offsets
import sparkmq.offsets.offset_file
import sparkmq.offsets.table


@pytest.mark.parametrize(
    "module",
    [sparkmq.offsets, sparkmq.offsets.table, sparkmq.offsets.offset_file],
    ids=lambda module: module.__name__,
)
def test_docstring_examples(module: ModuleType) -> None:
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS)

    assert results.attempted > 0
    assert results.failed == 0
