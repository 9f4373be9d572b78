"""ClientSecurity: a client's ACL credentials and TLS settings, handed to every client class.

RocketMQ's ``AclClientRPCHook`` (signing) and ``ClientConfig.useTLS`` in one frozen, picklable
value: the Spark source and sink build it from their ``accessKey`` / ``secretKey`` / ``tlsEnable``
/ ``tlsTrustCertPath`` options, applications pass it as ``security=``.

>>> security = ClientSecurity.of(access_key="RocketMQ", secret_key="12345678")
>>> security.signer()({"topic": "T"}, b"")["AccessKey"]
'RocketMQ'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkmq.errors import ConfigError

if TYPE_CHECKING:  # the remoting package loads asyncio: Spark's driver-side runner does without it
    from ssl import SSLContext

    from sparkmq.protocol.acl_signing import SessionCredentials  # imported when there are credentials
    from sparkmq.remoting.client import Signer


@dataclass(frozen=True)
class ClientSecurity:
    """Credentials to sign every request with (None: unsigned) and whether to connect over TLS.

    ``trust_cert_path``: a PEM file of the CA (or self-signed certificate) that brokers and
    NameServers present; None verifies against the system's CAs.
    """

    credentials: SessionCredentials | None = None
    tls: bool = False
    trust_cert_path: Path | None = None

    @classmethod
    def of(
        cls,
        access_key: str | None = None,
        secret_key: str | None = None,
        *,
        tls: bool = False,
        trust_cert_path: str | Path | None = None,
    ) -> ClientSecurity:
        """From loose settings; one of ``access_key`` / ``secret_key`` without the other is a ConfigError."""
        if bool(access_key) != bool(secret_key):
            raise ConfigError("accessKey and secretKey must be given together")
        credentials = None
        if access_key and secret_key:
            from sparkmq.protocol.acl_signing import SessionCredentials

            credentials = SessionCredentials(access_key, secret_key)
        return cls(credentials, tls, Path(trust_cert_path) if trust_cert_path else None)

    def signer(self) -> Signer | None:
        return None if self.credentials is None else self.credentials.sign

    def ssl_context(self) -> SSLContext | None:
        if not self.tls:
            return None
        from sparkmq.remoting.tls import client_context

        return client_context(self.trust_cert_path)


__all__ = ["ClientSecurity"]
