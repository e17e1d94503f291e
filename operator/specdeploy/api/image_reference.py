"""`spec.image` as the kubelet parses it, so a reference it cannot parse is refused at `kubectl
apply` and `plan -f` instead of leaving the pods in InvalidImageName after the plan, the
preflight Job and the rollout were made for it.

The kubelet (pkg/kubelet/images: applyDefaultImageTag -> parsers.ParseImageName) calls
distribution/reference's ParseNormalizedNamed: the repository path must be lower-case
(normalize.go), then the grammar of reference.go / regexp.go holds

    reference := name [ ":" tag ] [ "@" digest ]        name: at most 255 characters
    name      := [domain "/"] path-component ["/" path-component]*
    domain    := host [":" port]                        host: DNS name (any case) or [IPv6]
    path-component := [a-z0-9]+ ([._] | __ | -+ ) [a-z0-9]+ ...
    tag       := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
    digest    := algorithm ":" hex                      go-digest: sha256 (64), sha384 (96),
                                                        sha512 (128) lower-case hex digits

and a bare 64-hex-digit string is refused as a name (it would read as an image ID)."""

from __future__ import annotations

import re

from specdeploy.findings import cut

IMAGE_INVALID = "image-invalid"
NAME_TOTAL_LENGTH_MAX = 255
MAX_TAG = 128
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}

_ALPHANUMERIC = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:(?:[._]|__|-+){_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE_RE = re.compile(rf"^({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?$")
_NAME_RE = re.compile(rf"^{_NAME}$")
_TAG_RE = re.compile(rf"^{_TAG}$")
FORM = "[registry[:port]/]repository[:tag][@sha256:<64 hex digits>]"


def image_problem(image: str) -> str | None:
    """Why the kubelet cannot parse `image`, in a sentence naming the part at fault; None when it can."""
    shown = repr(cut(image, 80))
    if re.fullmatch(r"[a-f0-9]{64}", image):
        return f"{shown} is an image ID, not a reference: name the image, {FORM}"
    match = REFERENCE_RE.match(image)
    if match is None:
        return f"{shown} is not an image reference: {_part_at_fault(image)}"
    name, _, digest = match.groups()
    first, slash, rest = name.partition("/")
    if slash and first.lower() != first and not re.search(r"[.:]", first) and first != "localhost":
        return f"{shown}: {first!r} would be read as a registry host (upper-case letters); repositories are lower-case"
    if len(name) > NAME_TOTAL_LENGTH_MAX:
        return f"{shown}: the name is {len(name)} characters, at most {NAME_TOTAL_LENGTH_MAX}"
    return _digest_problem(shown, digest) if digest else None


def _part_at_fault(image: str) -> str:
    """Which part of an unparseable reference breaks the grammar, and what that part allows."""
    rest, _, digest = image.partition("@")
    name, colon, tag = rest.rpartition(":") if ":" in rest.rsplit("/", 1)[-1] else (rest, "", "")
    if _NAME_RE.match(name.lower()) and not _NAME_RE.match(name):
        host, slash, path = name.partition("/")
        if not (slash and (re.search(r"[.:]", host) or host == "localhost")):
            host, slash, path = "", "", name
        meant = f"{host}{slash}{path.lower()}{colon}{tag}{'@' if digest else ''}{digest}"
        return f"the repository has upper-case letters, which the kubelet refuses: use {cut(meant, 80)!r}"
    if not _NAME_RE.match(name):
        return (f"the repository must be lower-case letters and digits, separated by '.', '_', '__', '-' or '/', "
                f"after an optional registry host[:port]: {FORM}")
    if colon and not _TAG_RE.match(tag):
        if len(tag) > MAX_TAG:
            return f"the tag is {len(tag)} characters, at most {MAX_TAG}"
        return "a tag is letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'"
    return f"a digest is sha256: and 64 hex digits (or sha384:, sha512:), after '@': {FORM}"


def _digest_problem(shown: str, digest: str) -> str | None:
    """go-digest's Validate: a known algorithm and exactly its length of lower-case hex."""
    algorithm, _, hex_digits = digest.partition(":")
    length = DIGEST_HEX_LENGTHS.get(algorithm)
    if length is None:
        return f"{shown}: digest algorithm {algorithm!r} is not one the kubelet knows ({', '.join(DIGEST_HEX_LENGTHS)})"
    if len(hex_digits) != length or hex_digits.lower() != hex_digits:
        got = f"{len(hex_digits)}" if len(hex_digits) != length else "upper-case ones"
        return f"{shown}: a {algorithm} digest is {length} lower-case hex digits, got {got}"
    return None
