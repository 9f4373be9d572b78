"""Remote-address patterns of plain_acl.yml (RocketMQ's ``RemoteAddressStrategyFactory``).

A pattern is parsed once into a predicate over the client's IP text:

* blank: matches nothing; ``*``, ``*.*.*.*`` or ``*:*:*:*:*:*:*:*``: matches everything;
* one IPv4/IPv6 address (IPv6 compared in its expanded form);
* a comma list ``a,b,c`` or a brace list on the last segment ``192.168.1.{1,2,3}``;
* an IPv4 range with ``*`` or ``a-b`` from some segment on: ``192.168.*``, ``192.168.1.1-100``,
  ``10.*.*.*`` (a fixed segment after a ranged one is refused, as RocketMQ's ``AclUtils.verify``);
* an IPv6 range the same way with hexadecimal segments: ``1050:0:0:0:5:600:300c:*``,
  ``1050::5:600:300c:1-ff`` (``::`` stands for the zero segments, as in an address).

A pattern that is none of these is refused with a :class:`ValueError` that the file loader reports
with its line.

>>> parse_address_pattern("192.168.1.1-100")("192.168.1.42"), parse_address_pattern("")("1.2.3.4")
(True, False)
>>> parse_address_pattern("fe80::1-ff")(normalise_ip("fe80::a0"))
True
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import NamedTuple

AddressMatcher = Callable[[str], bool]
_ALL = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


def normalise_ip(text: str) -> str:
    """IPv4 as is, IPv6 exploded and upper-case (``AclUtils.expandIP``), anything else unchanged."""
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)  # a dual-stack socket's view of an IPv4 client
        return address.exploded.upper()
    return str(address)


def _exact(text: str) -> str:
    try:
        ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"{text.strip()!r} is not an IPv4 or IPv6 address") from None
    return normalise_ip(text)


def _never(_ip: str) -> bool:
    return False


def _always(_ip: str) -> bool:
    return True


def parse_address_pattern(pattern: str | None) -> AddressMatcher:
    """A predicate for one plain_acl.yml address pattern; :class:`ValueError` names what is wrong."""
    text = "" if pattern is None else str(pattern).strip()
    if not text:
        return _never
    if text in _ALL:
        return _always
    if text.endswith("}"):
        head, brace, tail = text.rpartition("{")
        if not brace or not head or head[-1] not in ".:":
            raise ValueError(f"{text!r}: a brace list must be the last segment, as 192.168.1.{{1,2}}")
        return _one_of({_exact(head + item) for item in tail[:-1].split(",") if item.strip()})
    if "," in text:
        return _one_of({_exact(item) for item in text.split(",") if item.strip()})
    if "*" in text or "-" in text:
        return _range(text)
    one = _exact(text)
    return lambda ip: ip == one


def _one_of(addresses: set[str]) -> AddressMatcher:
    frozen = frozenset(addresses)
    return lambda ip: ip in frozen


class _Family(NamedTuple):
    separator: str
    segments: int
    base: int
    top: int


_IPV4 = _Family(".", 4, 10, 255)
_IPV6 = _Family(":", 8, 16, 0xFFFF)


def _range(text: str) -> AddressMatcher:
    family = _IPV6 if ":" in text else _IPV4
    segments = _ipv6_segments(text) if family is _IPV6 else [s.strip() for s in text.split(".")]
    if len(segments) > family.segments or segments[0] in ("", "*") or "-" in segments[0]:
        raise ValueError(
            f"{text!r} is not an address range such as 192.168.*.*, 192.168.1.1-100 or 1050:0:0:0:5:600:300c:*"
        )
    bounds: list[tuple[int, int]] = []
    ranged = False
    for segment in segments + ["*"] * (family.segments - len(segments)):
        low, high = _segment_bounds(text, segment, family)
        if ranged and (low, high) != (0, family.top):
            raise ValueError(f"{text!r}: after a ranged segment the others must be *")
        ranged = ranged or low != high
        bounds.append((low, high))
    frozen = tuple(bounds)

    def match(ip: str) -> bool:
        parts = ip.split(family.separator)
        if len(parts) != family.segments:
            return False
        try:
            values = [int(p, family.base) for p in parts]
        except ValueError:
            return False
        return all(low <= v <= high for v, (low, high) in zip(values, frozen, strict=True))

    return match


def _ipv6_segments(text: str) -> list[str]:
    """The 8 segments of an IPv6 pattern (``::`` filled with zeros), or fewer when it ends early."""
    head, gap, tail = text.partition("::")
    left = [s.strip() for s in head.split(":")] if head else []
    if not gap:
        return left
    right = [s.strip() for s in tail.split(":")] if tail else []
    zeros = 8 - len(left) - len(right)
    if zeros < 1 or "::" in tail:
        raise ValueError(f"{text!r} is not an IPv6 range: '::' must stand for at least one segment, once")
    return left + ["0"] * zeros + right


def _segment_bounds(text: str, segment: str, family: _Family) -> tuple[int, int]:
    if segment == "*":
        return 0, family.top
    low_text, dash, high_text = segment.partition("-")
    try:
        low = int(low_text, family.base)
        high = int(high_text, family.base) if dash else low
    except ValueError:
        raise ValueError(f"{text!r}: segment {segment!r} is not a number, a-b or *") from None
    if not 0 <= low <= high <= family.top:
        top = f"{family.top:x}" if family.base == 16 else str(family.top)
        raise ValueError(f"{text!r}: segment {segment!r} is not within 0..{top} with start <= end")
    return low, high


__all__ = ["AddressMatcher", "normalise_ip", "parse_address_pattern"]
