"""Optional C accelerators, each with a pure-Python reference elsewhere in the package.

* ``sendlane``: :mod:`sparkmq.native._sendlane`, the native lane of plain single sends
  (broker/processors/send_lane.py; docs/native.md).
* ``queueread``: :mod:`sparkmq.native._queueread`, one ConsumeQueue read of the store
  (store/reads.py; its numpy path is the reference).
* ``batchitems``: :mod:`sparkmq.native._batchitems`, a SEND_BATCH_MESSAGE body encoded or decoded in one
  call (message/batch.py is the reference).
* ``clientframes``: :mod:`sparkmq.native._clientframes`, a producer's send frame rendered and a read's plain
  answers split in one call each (client/send_frames.py and remoting/client_connection.py, where it is loaded,
  are the references).

Each is the compiled module, or None when it was not built or ``SPARKMQ_NATIVE=0`` is set in the
environment (the one switch that forces the Python paths everywhere; read once, at import).
:func:`extension` is the one way in for every extension setup.py builds, these and those of other
packages, so that with the switch off none of them is even loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

#: Whether the native paths are in use (not switched off by ``SPARKMQ_NATIVE=0``).
ENABLED: bool = os.environ.get("SPARKMQ_NATIVE", "1") != "0"


def extension(name: str) -> ModuleType | None:
    """The compiled module ``name`` (a dotted name setup.py builds), or None when the switch is off or it
    was not built (no compiler at install time: the Python paths serve everything)."""
    if not ENABLED:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def built(name: str) -> bool:
    """Whether the compiled module ``name`` exists, whatever the switch says (it is not loaded)."""
    return importlib.util.find_spec(name) is not None


sendlane: ModuleType | None = extension("sparkmq.native._sendlane")
queueread: ModuleType | None = extension("sparkmq.native._queueread")
batchitems: ModuleType | None = extension("sparkmq.native._batchitems")
#: Whether this package's extensions all exist, whatever the switch says.
BUILT: bool = all(
    built(f"sparkmq.native.{name}") for name in ("_sendlane", "_queueread", "_batchitems", "_clientframes")
)

__all__ = ["BUILT", "ENABLED", "batchitems", "built", "extension", "queueread", "sendlane"]
