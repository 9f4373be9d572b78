"""ACL credentials for the operator tools, passed to the client as ``security=`` when it takes them.

The ACL work adds ``sparkmq.client.security.ClientSecurity`` and a ``security=`` argument to the
client classes; until a build has it, asking for credentials is refused with a clear error rather
than silently sending unsigned requests.

>>> client_options(None, None)
{}
"""

from __future__ import annotations

import importlib
from typing import Any

from sparkmq.errors import ConfigError


def client_options(access_key: str | None, secret_key: str | None) -> dict[str, Any]:
    """``{"security": ClientSecurity(...)}`` for the client constructors, ``{}`` without credentials.

    Raises ConfigError when only one of the two is given, or when this build's client has no ACL support.
    """
    if not access_key and not secret_key:
        return {}
    if not (access_key and secret_key):
        raise ConfigError("give both --access-key and --secret-key")
    try:
        security = importlib.import_module("sparkmq.client.security")
    except ModuleNotFoundError as exc:
        raise ConfigError(
            "this sparkmq client has no ACL support (sparkmq.client.security): credentials cannot be "
            "sent; use --allow-writes to enable writes without them"
        ) from exc
    return {"security": security.ClientSecurity.of(access_key=access_key, secret_key=secret_key)}
