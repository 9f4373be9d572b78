"""AclValidator: RocketMQ ACL 1.0's check of every request (``PlainPermissionManager.validate``).

The remoting server calls :meth:`AclValidator.authorize` before a request reaches its processor;
``None`` lets it through, a response is the refusal (code NO_PERMISSION, remark naming the
check that failed, in RocketMQ's words). The order is RocketMQ's:

1. the client IP is in ``globalWhiteRemoteAddresses`` → allowed, nothing else checked;
2. no ``AccessKey`` → "No accessKey is configured"; unknown → "No acl config for <ak>";
3. the IP is in the account's ``whiteRemoteAddress`` → allowed (signature and permissions skipped);
4. the HMAC-SHA1 signature differs → "Check signature failed for accessKey=<ak>";
5. exactly PUB on RMQ_SYS_TRACE_TOPIC → allowed (message trace);
6. an admin request code from a non-admin account → "Need admin permission for request code=…";
   an admin account with no topicPerms/groupPerms skips the rest; each needed resource is
   checked against its listed permission or the default one → "No default permission for topic:T"
   / "…group:G" (4.9.x words both cases so; sparkmq says "No permission for …" for a listed one).

The accounts file is reloaded by :meth:`reload_if_changed` (the broker calls it every second);
a file that no longer parses is logged and the last good table stays in force.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from pathlib import Path

from sparkmq.broker.acl.accounts import (
    RETRY_PREFIX,
    Account,
    AclTable,
    Perm,
    check_permission,
    load_acl_file,
)
from sparkmq.broker.acl.addresses import normalise_ip
from sparkmq.broker.acl.resources import ADMIN_CODES, needed_resources
from sparkmq.errors import ConfigError, SparkmqError
from sparkmq.protocol import RemotingCommand, ResponseCode
from sparkmq.protocol.acl_signing import (
    ACCESS_KEY,
    SIGNATURE,
    content_to_sign,
    signature,
)
from sparkmq.remoting import RemotingConnection

logger = logging.getLogger(__name__)
DATE_TIME_TOLERANCE_S = 15 * 60  # a gRPC signature's age (either way: clocks differ)
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
RELOAD_INTERVAL_S = 1.0  # RocketMQ's AclFileWatchService looks every 500 ms; a second is soon enough
_IP_ATTRIBUTE = "acl.ip"


class AclDenied(SparkmqError):
    """A refused request: code NO_PERMISSION, ``remark`` is what the client is told."""

    code = ResponseCode.NO_PERMISSION


class AclValidator:
    """Checks requests against the accounts file at ``path``; a bad file raises ConfigError here.

    >>> # validator = AclValidator(Path("conf/plain_acl.yml")); server.authorize = validator.authorize
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._digest = _digest(path)
        self.table: AclTable = load_acl_file(path)
        self.reloads = 0  # successful reloads (tests and metrics)
        self.denied = 0

    def reload_if_changed(self) -> bool:
        """Reload when the file's content changed; True when a new table is in force.

        The content is hashed (as RocketMQ's FileWatchService does): an mtime can stay the same
        across two quick writes of the same size.
        """
        digest = _digest(self.path)
        if digest == self._digest:
            return False
        self._digest = digest
        try:
            table = load_acl_file(self.path)
        except ConfigError as exc:
            logger.error("ACL file changed but is refused, the previous accounts stay in force: %s", exc.remark)
            return False
        self.table = table
        self.reloads += 1
        logger.info(
            "ACL file %s reloaded: %d accounts, %d global white addresses",
            self.path,
            len(table.accounts),
            len(table.global_white),
        )
        return True

    def authorize(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | None:
        """None when ``request`` may be served; else the NO_PERMISSION response to send."""
        ip = connection.attributes.get(_IP_ATTRIBUTE)
        if ip is None:
            ip = connection.attributes[_IP_ATTRIBUTE] = normalise_ip(connection.peer[0])
        try:
            self.check(request, ip)
        except AclDenied as exc:
            self.denied += 1
            logger.info("ACL refused request code %d from %s:%d: %s", request.code, *connection.peer, exc.remark)
            return request.make_response(exc.code, remark=exc.remark)
        return None

    def check(self, request: RemotingCommand, ip: str) -> None:
        """Raise :class:`AclDenied` unless ``request`` from ``ip`` passes every check."""

        def signed(account: Account) -> bool:
            assert account.mac is not None
            expected = signature(account.mac, content_to_sign(request.ext_fields, request.body, request.version))
            return hmac.compare_digest(expected.encode(), request.ext_fields.get(SIGNATURE, "").encode())

        account = self._signed_account(request.ext_fields.get(ACCESS_KEY), ip, signed)
        if account is None:
            return
        needed = needed_resources(request)
        if needed.get(TRACE_TOPIC) == Perm.PUB:
            return
        _check_permissions(request.code, needed, account)

    def check_grpc(self, authorization: str, date_time: str, ip: str, needed: dict[str, Perm]) -> None:
        """A gRPC request (RocketMQ 5 clients): ``authorization`` is ``MQv2-HMAC-SHA1 Credential=AK,
        SignedHeaders=x-mq-date-time, Signature=HEX`` over ``date_time``; AclDenied unless it passes."""
        fields = dict(part.strip().partition("=")[::2] for part in authorization.partition(" ")[2].split(","))

        def signed(account: Account) -> bool:
            assert account.mac is not None
            mac = account.mac.copy()
            mac.update(date_time.encode("utf-8"))
            return hmac.compare_digest(mac.hexdigest().upper(), fields.get("Signature", "").upper())

        account = self._signed_account(fields.get("Credential", "").split("/")[0] or None, ip, signed)
        if account is not None:
            _check_date_time(date_time, time.time())
            _check_permissions(0, needed, account)

    def _signed_account(self, access_key: str | None, ip: str, signed: Callable[[Account], bool]) -> Account | None:
        """The account whose permissions apply, None when ``ip`` is white-listed; AclDenied for a missing
        key, an unknown account or a wrong signature."""
        table = self.table  # one table for the whole check, even if a reload swaps it meanwhile
        for match in table.global_white:
            if match(ip):
                return None
        if access_key is None:
            raise AclDenied("No accessKey is configured")
        account = table.accounts.get(access_key)
        if account is None:
            raise AclDenied(f"No acl config for {access_key}")
        if account.white_address(ip):
            return None
        if not signed(account):
            raise AclDenied(f"Check signature failed for accessKey={access_key}")
        return account


def _check_date_time(date_time: str, now: float) -> None:
    """A signed gRPC request's ``x-mq-date-time`` (``20261128T235600Z``, UTC) must be within
    ``DATE_TIME_TOLERANCE_S`` of the broker's clock: a captured signature cannot be replayed later."""
    try:
        signed_at = calendar.timegm(time.strptime(date_time, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        raise AclDenied(f"x-mq-date-time {date_time[:40]!r} is not a UTC time like 20260101T000000Z") from None
    if abs(now - signed_at) > DATE_TIME_TOLERANCE_S:
        raise AclDenied(
            f"x-mq-date-time {date_time} is {abs(now - signed_at):.0f} s away from the broker's clock"
            f" (at most {DATE_TIME_TOLERANCE_S} s)"
        )


def _check_permissions(code: int, needed: dict[str, Perm], account: Account) -> None:
    if code in ADMIN_CODES and not account.admin:
        raise AclDenied(f"Need admin permission for request code={code}, but accessKey={account.access_key} is not")
    if account.admin and not account.resource_perms:
        return
    for resource, perm in needed.items():
        is_group = resource.startswith(RETRY_PREFIX)
        owned = account.resource_perms.get(resource)
        if owned is None:
            default = account.default_group_perm if is_group else account.default_topic_perm
            if not check_permission(perm, default):
                raise AclDenied(f"No default permission for {_describe(resource, is_group)}")
        elif not check_permission(perm, owned):
            raise AclDenied(f"No permission for {_describe(resource, is_group)}")


def _describe(resource: str, is_group: bool) -> str:
    return f"group:{resource[len(RETRY_PREFIX) :]}" if is_group else f"topic:{resource}"


def _digest(path: Path) -> bytes | None:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return None


__all__ = ["RELOAD_INTERVAL_S", "AclDenied", "AclValidator"]
