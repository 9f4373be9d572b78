"""The ``sparkmq`` command line: the only code that reads argv and the environment."""

from __future__ import annotations

from sparkmq.cli.main import main

__all__ = ["main"]
