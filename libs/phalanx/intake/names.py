"""Kubernetes name rules (RFC 1123), shared by the intake and the gRPC request checks.

Names end up in Redis keys and in "namespace/name" pod keys, so a `/` or an empty part in one breaks
whatever splits those keys later; both the intake and the services refuse such names up front.
"""

from __future__ import annotations

import re

MAX_LABEL = 63  # namespaces, and each part of a gang group member's namespace
MAX_SUBDOMAIN = 253  # pods, nodes, PodGroups, ConfigMaps

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

LABEL_RULE = "a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending alphanumeric"
SUBDOMAIN_RULE = (
    "a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.', starting and ending alphanumeric"
)


def is_dns_label(name: object) -> bool:
    # The length check comes first so a huge string never reaches the regex.
    return isinstance(name, str) and 0 < len(name) <= MAX_LABEL and _DNS_LABEL.fullmatch(name) is not None


def is_dns_subdomain(name: object) -> bool:
    return isinstance(name, str) and 0 < len(name) <= MAX_SUBDOMAIN and _DNS_SUBDOMAIN.fullmatch(name) is not None


def is_object_key(key: object) -> bool:
    """A "namespace/name" key of a pod or a gang."""
    if not isinstance(key, str):
        return False
    namespace, slash, name = key.partition("/")
    return bool(slash) and is_dns_label(namespace) and is_dns_subdomain(name)
