"""The client's optional C accelerator (``client_lane.c``): ``frame`` and ``deliver``, or None.

None when the extension was not built (no compiler at install time) or ``SPARKMQ_NATIVE=0`` switched
the native paths off (:mod:`sparkmq.native`); the Python they replace is the reference
(``SendTemplate.frame``, ``ClientConnection.data_received``'s msgspec walk), and
tests/remoting/test_client_lane_parity.py compares both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkmq.native import ENABLED

frame: Callable[[bytes, bytes, int, int, int, int, str, bytes], bytes | None] | None = None
deliver: Callable[[bytes, int, dict[int, Any]], int] | None = None
BUILT = False
try:
    from sparkmq.remoting import _clientlane  # type: ignore[attr-defined]
except ImportError:  # no compiler at install time: the Python paths serve everything
    pass
else:
    BUILT = True
    if ENABLED:
        frame, deliver = _clientlane.frame, _clientlane.deliver

__all__ = ["BUILT", "deliver", "frame"]
