"""plain_acl.yml parsing: RocketMQ's format, refusals with the line and the reason, address patterns."""

from __future__ import annotations

import pytest

from sparkmq.broker.acl.accounts import (
    Perm,
    check_permission,
    parse_acl_text,
    parse_perm,
)
from sparkmq.broker.acl.addresses import normalise_ip, parse_address_pattern
from sparkmq.errors import ConfigError

ROCKETMQ_SAMPLE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_rocketmq_sample_file_parses_as_rocketmq_reads_it() -> None:
    table = parse_acl_text(ROCKETMQ_SAMPLE)
    assert [m("10.10.103.7") for m in table.global_white] == [True, False]
    first, second = table.accounts["RocketMQ"], table.accounts["rocketmq2"]
    assert first.secret_key == "12345678"  # a YAML int, taken as its text
    assert not first.admin and second.admin
    assert first.default_topic_perm == Perm.DENY and first.default_group_perm == Perm.SUB
    assert first.resource_perms == {
        "topicA": Perm.DENY,
        "topicB": Perm.PUB | Perm.SUB,
        "topicC": Perm.SUB,
        "%RETRY%groupA": Perm.DENY,
        "%RETRY%groupB": Perm.PUB | Perm.SUB,
        "%RETRY%groupC": Perm.SUB,
    }
    assert not first.white_address("192.168.1.5")  # blank: never matches
    assert second.white_address("192.168.1.5") and not second.white_address("192.168.2.5")
    assert second.default_topic_perm == Perm.DENY  # missing → DENY
    assert second.resource_perms == {}


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("accounts:\n  - accessKey: short\n    secretKey: 12345678\n", 2, "length should longer than 6"),
        ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 123\n", 3, "length should longer than 6"),
        ("accounts:\n  - secretKey: 12345678\n", 2, "accessKey=None cannot be null"),
        (
            "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    topicPerms:\n      - topicA=ALL\n",
            5,
            "expected permissions are",
        ),
        (
            "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    groupPerms:\n      - groupA\n",
            5,
            "parse resource permission failed for group:groupA",
        ),
        (
            "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    whiteRemoteAddress: 300.1.1.1\n",
            4,
            "bad remote address pattern",
        ),
        ("globalWhiteRemoteAddresses:\n  - 10.10.*.7\n", 2, "after a ranged segment the others must be *"),
        (
            "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    admin: maybe\n",
            4,
            "admin must be true or false",
        ),
        (
            "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n  - accessKey: RocketMQ\n    "
            "secretKey: 87654321\n",
            4,
            "defined twice",
        ),
        ("accounts: [\n  - oops\n", 2, "not valid YAML"),
        ("accounts:\n  accessKey: RocketMQ\n", 2, "accounts must be a list"),
    ],
)
def test_malformed_file_is_refused_with_line_and_reason(text: str, line: int, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_acl_text(text, "conf/plain_acl.yml")
    assert f"conf/plain_acl.yml line {line}:" in caught.value.remark
    assert reason in caught.value.remark


def test_empty_file_has_no_accounts() -> None:
    assert parse_acl_text("").accounts == {}
    assert parse_acl_text("# nothing\n").global_white == ()


@pytest.mark.parametrize(
    ("text", "perm"),
    [
        ("PUB", Perm.PUB),
        ("SUB", Perm.SUB),
        ("PUB|SUB", Perm.PUB | Perm.SUB),
        ("SUB|PUB", Perm.PUB | Perm.SUB),
        ("DENY", Perm.DENY),
        ("ANY", Perm.DENY),
        (None, Perm.DENY),
        (" PUB ", Perm.PUB),
    ],
)
def test_permission_strings(text: str | None, perm: Perm) -> None:
    assert parse_perm(text) == perm


def test_check_permission_rules() -> None:
    assert check_permission(Perm.PUB, Perm.PUB | Perm.SUB)
    assert not check_permission(Perm.PUB, Perm.SUB)
    assert not check_permission(Perm.SUB, Perm.DENY | Perm.SUB)
    assert check_permission(Perm.ANY, Perm.SUB) and not check_permission(Perm.ANY, Perm.DENY)


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("*.*.*.*", ["9.9.9.9"], []),
        ("", [], ["127.0.0.1"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
        ("192.168.1.{1,2,3}", ["192.168.1.2"], ["192.168.1.4"]),
        ("10.0.0.1,10.0.0.2", ["10.0.0.2"], ["10.0.0.3"]),
        ("192.168.*", ["192.168.200.1"], ["192.169.0.1"]),
        ("192.168.1.1-100", ["192.168.1.100", "192.168.1.1"], ["192.168.1.101", "192.168.2.50"]),
        ("10.1-2.*.*", ["10.2.9.9"], ["10.3.0.0"]),
        ("::1", [normalise_ip("::1")], [normalise_ip("::2")]),
        (
            "1050:0000:0000:0000:0005:0600:300c:*",
            [normalise_ip("1050::5:600:300c:326b")],
            [normalise_ip("1050::5:600:300d:1"), "10.0.0.1"],
        ),
        ("1050::5:600:300c:1-ff", [normalise_ip("1050::5:600:300c:a0")], [normalise_ip("1050::5:600:300c:100")]),
        ("fe80:0-1:*", [normalise_ip("fe80:1::9")], [normalise_ip("fe80:2::")]),
    ],
)
def test_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    match = parse_address_pattern(pattern)
    assert all(match(ip) for ip in inside)
    assert not any(match(ip) for ip in outside)


def test_ipv4_mapped_peer_matches_ipv4_patterns() -> None:
    assert parse_address_pattern("127.0.0.1")(normalise_ip("::ffff:127.0.0.1"))


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("1050:*:0:1", "after a ranged segment the others must be *"),
        ("1050::1::*", "'::' must stand for at least one segment, once"),
        ("fe80::g-h", "is not a number"),
        ("fe80::1-10000", "not within 0..ffff"),
        ("192.168.300.*", "not within 0..255"),
        ("*-1.2.3.4", "is not an address range"),
    ],
)
def test_bad_ranges_say_why(pattern: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_address_pattern(pattern)
