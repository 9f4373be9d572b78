"""plain_acl.yml, RocketMQ's ACL 1.0 accounts file, parsed once into an immutable :class:`AclTable`.

The file is read as a YAML node tree so every refusal names the line: a malformed file raises
:class:`~sparkmq.errors.ConfigError` ``"<path> line N: <reason>"``. RocketMQ's rules (4.9.x
``PlainPermissionManager``): access and secret keys longer than 6 characters; numbers such as
``secretKey: 12345678`` are taken as their text; ``defaultTopicPerm`` / ``defaultGroupPerm``
missing or unknown mean DENY; a ``topicPerms`` / ``groupPerms`` entry must be ``name=PERM`` with
PERM one of DENY, PUB, SUB, PUB|SUB, SUB|PUB; groups are stored as ``%RETRY%<group>``. sparkmq is
stricter in one place: an access key defined twice in one file is refused (RocketMQ keeps one
silently).

>>> table = parse_acl_text("accounts:\\n- {accessKey: RocketMQ, secretKey: 12345678, defaultTopicPerm: PUB}\\n")
>>> table.accounts["RocketMQ"].secret_key, table.accounts["RocketMQ"].default_topic_perm == Perm.PUB
('12345678', True)
"""

from __future__ import annotations

import enum
import hmac
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sparkmq.broker.acl.addresses import AddressMatcher, parse_address_pattern
from sparkmq.errors import ConfigError
from sparkmq.message.names import RETRY_GROUP_TOPIC_PREFIX, retry_topic
from sparkmq.protocol.acl_signing import prepared_key

RETRY_PREFIX = RETRY_GROUP_TOPIC_PREFIX  # the ACL modules' name for it
KEY_MIN_LENGTH = 6  # AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: longer is required
_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"


class Perm(enum.IntFlag):
    """RocketMQ's ``Permission`` bits."""

    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8


_PERM_OF_TEXT = {
    "DENY": Perm.DENY,
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.PUB | Perm.SUB,
    "SUB|PUB": Perm.PUB | Perm.SUB,
}


def parse_perm(text: str | None) -> Perm:
    """``Permission.parsePermFromString``: anything but the four valid strings is DENY."""
    return _PERM_OF_TEXT.get((text or "").strip(), Perm.DENY)


def check_permission(needed: Perm, owned: Perm) -> bool:
    """``Permission.checkPermission``: DENY wins; ANY needs PUB or SUB; else any shared bit."""
    if owned & Perm.DENY:
        return False
    if needed & Perm.ANY:
        return bool(owned & (Perm.PUB | Perm.SUB))
    return bool(needed & owned)


@dataclass(frozen=True)
class Account:
    """One entry of ``accounts``; ``resource_perms`` holds topics and ``%RETRY%<group>`` keys."""

    access_key: str
    secret_key: str
    white_address: AddressMatcher
    admin: bool
    default_topic_perm: Perm
    default_group_perm: Perm
    resource_perms: dict[str, Perm] = field(default_factory=dict)
    #: HMAC-SHA1 keyed once with ``secret_key`` (copied per request: no per-request key setup).
    mac: hmac.HMAC | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mac is None:
            object.__setattr__(self, "mac", prepared_key(self.secret_key))


@dataclass(frozen=True)
class AclTable:
    """A loaded accounts file: the global white list and the accounts by access key."""

    global_white: tuple[AddressMatcher, ...] = ()
    accounts: dict[str, Account] = field(default_factory=dict)


def load_acl_file(path: Path) -> AclTable:
    """Read and parse ``path``; :class:`ConfigError` names the file, the line and the reason."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"ACL file {path} cannot be read: {exc}") from exc
    return parse_acl_text(text, str(path))


def parse_acl_text(text: str, source: str = "plain_acl.yml") -> AclTable:
    """Parse plain_acl.yml text (``source`` names it in errors)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}{line}: not valid YAML: {problem}") from exc
    if root is None or _is_null(root):
        return AclTable()
    top = _mapping(root, source, "the document")
    global_white: list[AddressMatcher] = []
    for item in _sequence(top.get("globalWhiteRemoteAddresses"), source, "globalWhiteRemoteAddresses"):
        global_white.append(_address(item, source))
    accounts: dict[str, Account] = {}
    for item in _sequence(top.get("accounts"), source, "accounts"):
        account = _account(item, source)
        if account.access_key in accounts:
            raise _error(item, source, f"accessKey {account.access_key!r} is defined twice")
        accounts[account.access_key] = account
    return AclTable(tuple(global_white), accounts)


def _account(node: yaml.Node, source: str) -> Account:
    entry = _mapping(node, source, "an accounts entry")
    access_key = _text(entry.get("accessKey"), source, "accessKey")
    secret_key = _text(entry.get("secretKey"), source, "secretKey")
    if access_key is None or len(access_key) <= KEY_MIN_LENGTH:
        raise _error(
            entry.get("accessKey", node),
            source,
            f"the accessKey={access_key} cannot be null and length should longer than {KEY_MIN_LENGTH}",
        )
    if secret_key is None or len(secret_key) <= KEY_MIN_LENGTH:
        raise _error(
            entry.get("secretKey", node),
            source,
            f"the secretKey of accessKey={access_key} cannot be null and length should longer than {KEY_MIN_LENGTH}",
        )
    white = entry.get("whiteRemoteAddress")
    perms: dict[str, Perm] = {}
    for key, is_topic in (("groupPerms", False), ("topicPerms", True)):
        for item in _sequence(entry.get(key), source, key):
            name, perm = _resource_perm(item, source, "topic" if is_topic else "group")
            perms[name if is_topic else retry_topic(name)] = perm
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white_address=parse_address_pattern(None) if white is None else _address(white, source),
        admin=_bool(entry.get("admin"), source, "admin"),
        default_topic_perm=parse_perm(_text(entry.get("defaultTopicPerm"), source, "defaultTopicPerm")),
        default_group_perm=parse_perm(_text(entry.get("defaultGroupPerm"), source, "defaultGroupPerm")),
        resource_perms=perms,
    )


def _resource_perm(node: yaml.Node, source: str, kind: str) -> tuple[str, Perm]:
    text = _text(node, source, f"{kind}Perms entry") or ""
    name, equals, perm_text = (part.strip() for part in text.partition("="))
    if not equals or not name or "=" in perm_text:
        raise _error(node, source, f"parse resource permission failed for {kind}:{text} (expected name=PERM)")
    if perm_text not in _PERM_OF_TEXT:
        raise _error(
            node,
            source,
            f"parse resource permission error for {text}: the expected permissions are "
            "'DENY', 'SUB', 'PUB', 'SUB|PUB' or 'PUB|SUB'",
        )
    return name, _PERM_OF_TEXT[perm_text]


def _address(node: yaml.Node, source: str) -> AddressMatcher:
    try:
        return parse_address_pattern(_text(node, source, "address"))
    except ValueError as exc:
        raise _error(node, source, f"bad remote address pattern: {exc}") from exc


def _error(node: yaml.Node, source: str, reason: str) -> ConfigError:
    return ConfigError(f"{source} line {node.start_mark.line + 1}: {reason}")


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG


def _mapping(node: yaml.Node, source: str, what: str) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise _error(node, source, f"{what} must be a mapping")
    result: dict[str, yaml.Node] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            raise _error(key, source, f"{what} has a key that is not text")
        result[key.value] = value
    return result


def _sequence(node: yaml.Node | None, source: str, what: str) -> list[yaml.Node]:
    if node is None or _is_null(node):
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise _error(node, source, f"{what} must be a list")
    return list(node.value)


def _text(node: yaml.Node | None, source: str, what: str) -> str | None:
    if node is None or _is_null(node):
        return None
    if not isinstance(node, yaml.ScalarNode):
        raise _error(node, source, f"{what} must be a single value, not a list or mapping")
    return str(node.value)


def _bool(node: yaml.Node | None, source: str, what: str) -> bool:
    if node is None or _is_null(node):
        return False
    if not isinstance(node, yaml.ScalarNode) or node.tag != _BOOL_TAG:
        raise _error(node, source, f"{what} must be true or false")
    return str(node.value).lower() in ("true", "yes", "on", "y")


__all__ = [
    "Account",
    "AclTable",
    "Perm",
    "check_permission",
    "load_acl_file",
    "parse_acl_text",
    "parse_perm",
    "retry_topic",
]
