"""Optional C accelerators, each with a pure-Python reference elsewhere in the package.

* ``sendlane``: :mod:`sparkmq.native._sendlane`, the native lane of plain single sends
  (broker/processors/send_lane.py; docs/native.md).
* ``queueread``: :mod:`sparkmq.native._queueread`, one ConsumeQueue read of the store
  (store/reads.py; its numpy path is the reference).
* ``batchitems``: :mod:`sparkmq.native._batchitems`, a SEND_BATCH_MESSAGE body encoded or decoded in one
  call (message/batch.py is the reference).

Each is the compiled module, or None when it was not built or ``SPARKMQ_NATIVE=0`` is set in the
environment (the one switch that forces the Python paths everywhere; read once, at import).
``BUILT`` says whether every extension is importable, whatever the switch says.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def _built(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"sparkmq.native.{name}")
    except ImportError:  # no compiler at install time: the Python paths serve everything
        return None


_SENDLANE, _QUEUEREAD, _BATCHITEMS = _built("_sendlane"), _built("_queueread"), _built("_batchitems")
BUILT: bool = _SENDLANE is not None and _QUEUEREAD is not None and _BATCHITEMS is not None
#: Whether the native paths are in use (not switched off by ``SPARKMQ_NATIVE=0``).
ENABLED: bool = os.environ.get("SPARKMQ_NATIVE", "1") != "0"
sendlane: ModuleType | None = _SENDLANE if ENABLED else None
queueread: ModuleType | None = _QUEUEREAD if ENABLED else None
batchitems: ModuleType | None = _BATCHITEMS if ENABLED else None

__all__ = ["BUILT", "ENABLED", "batchitems", "queueread", "sendlane"]
