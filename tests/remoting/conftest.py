"""Fixtures shared by the remoting tests."""

from __future__ import annotations

import pytest

from sparkmq.remoting import client_connection, client_native


@pytest.fixture(params=["c-lane", "python"])
def lane(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once with the client's C lane delivering answers and once with the Python reference."""
    if request.param == "python":
        monkeypatch.setattr(client_connection, "_deliver", None)
    elif client_native.deliver is None:
        pytest.skip("the C lane is not built (or SPARKMQ_NATIVE=0)")
    return str(request.param)
