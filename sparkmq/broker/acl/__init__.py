"""RocketMQ ACL 1.0 on the broker: plain_acl.yml accounts and the per-request check.

``accounts`` parses the file, ``addresses`` the white-list patterns, ``resources`` maps request
codes to the topics and groups they touch, ``validator`` runs the check (the remoting server's
``authorize`` hook). The signing function clients use lives in :mod:`sparkmq.protocol.acl_signing`.
"""

from sparkmq.broker.acl.accounts import (
    Account,
    AclTable,
    Perm,
    load_acl_file,
    parse_acl_text,
)
from sparkmq.broker.acl.validator import RELOAD_INTERVAL_S, AclDenied, AclValidator

__all__ = [
    "RELOAD_INTERVAL_S",
    "Account",
    "AclDenied",
    "AclTable",
    "AclValidator",
    "Perm",
    "load_acl_file",
    "parse_acl_text",
]
