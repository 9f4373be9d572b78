"""Optional C accelerators, each with a pure-Python reference elsewhere in the package.

``sendlane`` is the compiled :mod:`sparkmq.native._sendlane` (the native lane of plain single
sends, docs/native.md), or None when it was not built or ``SPARKMQ_NATIVE=0`` is set in the
environment (the one switch that forces the Python paths everywhere; read once, at import).
``BUILT`` says whether the extension is importable at all, whatever the switch says.
"""

from __future__ import annotations

import os
from types import ModuleType

_built: ModuleType | None
try:
    from sparkmq.native import _sendlane

    _built = _sendlane
except ImportError:  # no compiler at install time: the Python paths serve everything
    _built = None

BUILT: bool = _built is not None
#: Whether the native paths are in use (built, and not switched off by ``SPARKMQ_NATIVE=0``).
ENABLED: bool = BUILT and os.environ.get("SPARKMQ_NATIVE", "1") != "0"
sendlane: ModuleType | None = _built if ENABLED else None

__all__ = ["BUILT", "ENABLED", "sendlane"]
