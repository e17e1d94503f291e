"""The API server's name rules (k8s.io/apimachinery/pkg/util/validation/validation.go), stated
once: object names, label and annotation keys and values. The CR's metadata, the pod fields a
spec passes through (nodeSelector, priorityClassName) and the children's names all use them."""

from __future__ import annotations

import re

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_RE = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")  # IsDNS1123Subdomain, <= 253
DNS1123_LABEL_RE = re.compile(rf"^{_DNS1123_LABEL}$")  # IsDNS1123Label, <= 63
MAX_SUBDOMAIN = 253
MAX_LABEL = 63
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME_RULE = "1-63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= MAX_SUBDOMAIN and bool(DNS1123_SUBDOMAIN_RE.match(value))


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a qualified name ([DNS-subdomain prefix/]name), as label and annotation
    keys must be (IsQualifiedName); None when it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or not is_dns1123_subdomain(prefix)):
        return f"its prefix (before '/') must be a DNS-1123 subdomain of at most {MAX_SUBDOMAIN} characters"
    if not name or len(name) > MAX_LABEL or not _QUALIFIED_NAME_RE.match(name):
        return f"its name must be {QUALIFIED_NAME_RULE}"
    return None


def is_label_value(value: str) -> bool:
    """IsValidLabelValue: at most 63 characters, empty allowed."""
    return len(value) <= MAX_LABEL and bool(LABEL_VALUE_RE.match(value))
