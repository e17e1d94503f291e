"""Which vLLM release judges a spec: `spec.vllmVersion`, else the release tag of `spec.image`,
else the default image's release. A release with no rule set here is judged by the nearest one,
with a warning that names it — never silently."""

from __future__ import annotations

import re
from functools import lru_cache

from specdeploy.findings import Finding, Stage, warning
from specdeploy.vllm import releases
from specdeploy.vllm.facts import VllmFacts

# Oldest first: one module per release in vllm/releases/ (its data: vllm/data/<version>.json).
SUPPORTED_VERSIONS: tuple[str, ...] = releases.SUPPORTED_VERSIONS
NEWEST_VERSION = SUPPORTED_VERSIONS[-1]
# The default image: the newest supported release, so a user who names no image gets today's
# vLLM. (Only 0.32.0 has a CPU build: the e2e suite names that release in its CRs.)
DEFAULT_VERSION = NEWEST_VERSION
DEFAULT_IMAGE = f"vllm/vllm-openai:v{DEFAULT_VERSION}"

# The finding that says the rule set judging a spec is a guess: no supported release is the
# image's (a custom tag, a nightly, a digest, a fork, a release we have no rules for).
VERSION_UNKNOWN = "vllm-version-unknown"

# Refusals of a name a release does not know, or of a combination it forbids: a SpeculativeConfig
# key, an option for a method, two options together, a server flag or one of its choices. These
# rules come and go from release to release, and nothing the planner computes reads them, so a
# plan for an image of unknown release may set them aside (pipeline.plan_for_image); a refusal of
# the models themselves may not (the planner computes from their geometry). In each release's
# vllm/config/speculative.py: 0.32.0 declares disable_padded_drafter_batch (line 447),
# use_heterogeneous_vocab (463; _verify_args at 1854: draft_model and greedy drafting only) and
# parallel_drafting (478), with no method check for the last; 0.33.0 the same (468, 496, 511);
# 0.34.0 drops the first two (its @config dataclass forbids extra fields: config/utils.py
# `ConfigDict(extra="forbid")`) and takes parallel_drafting only with dflash/dspark
# (_verify_args at 1688).
RELEASE_REFUSALS = frozenset({"speculative-config-unknown-key", "speculative-config-method", "speculative-config-combination",
                              "extra-arg-unknown-flag", "extra-arg-invalid-choice"})

# A release tag: 0.33.0, v0.33.0, v0.33.0-cu130, 0.33.0+cpu (a variant of the same release).
_RELEASE_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+_].*)?$")


@lru_cache(maxsize=None)
def rule_set(version: str) -> VllmFacts:
    """The facts of a supported release (KeyError for one without a data file)."""
    if version not in SUPPORTED_VERSIONS:
        raise KeyError(version)
    return VllmFacts.load(version)


def image_tag(image: str) -> str | None:
    """The tag of an image reference (`None` for a digest-only or untagged reference)."""
    if "@" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


# What an image's name says it was built for: ROCm where the repository or tag says so (AMD's
# rocm/vllm, vLLM's vllm/vllm-openai-rocm, tags such as v0.34.0-rocm), CUDA for vLLM's own
# vllm/vllm-openai and tags such as v0.34.0-cu130; anything else is not guessed.
_ROCM = re.compile(r"(^|[/_.:-])rocm($|[/_.:-])")
_CUDA_TAG = re.compile(r"(^|[-_.])(cu\d+|cuda[\d.]*)($|[-_.])")
CUDA_REPOSITORIES = ("vllm/vllm-openai", "docker.io/vllm/vllm-openai", "nvcr.io/nvidia/vllm")


def image_accelerator(image: str) -> str | None:
    """"rocm", "cuda" or None (not told by the name)."""
    reference = image.lower().split("@", 1)[0]
    tag = image_tag(reference) or ""
    repository = reference[: len(reference) - len(tag) - 1] if tag else reference
    if _ROCM.search(repository) or _ROCM.search(tag):
        return "rocm"
    if repository in CUDA_REPOSITORIES or _CUDA_TAG.search(tag):
        return "cuda"
    return None


def release_of(text: str | None) -> tuple[int, int, int] | None:
    match = _RELEASE_TAG.match(text or "")
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def _key(version: str) -> tuple[int, int, int]:
    return release_of(version)  # type: ignore[return-value]


def judging_version(vllm_version: str | None, image: str) -> tuple[VllmFacts, list[Finding]]:
    """The rule set that judges, and a `vllm-version-unknown` warning when none matches exactly."""
    if vllm_version:
        asked, field = vllm_version, "spec.vllmVersion"
    else:
        tag = image_tag(image)
        asked, field = (tag or image), "spec.image"
    release = release_of(asked)
    if release is not None:
        exact = f"{release[0]}.{release[1]}.{release[2]}"
        if exact in SUPPORTED_VERSIONS:
            return rule_set(exact), []
        older = [v for v in SUPPORTED_VERSIONS if _key(v) <= release]
        chosen = older[-1] if older else SUPPORTED_VERSIONS[0]
    else:
        chosen = NEWEST_VERSION
    what = f"vLLM {asked}" if release is not None else f"{asked!r} (not a release tag)"
    return rule_set(chosen), [warning(
        VERSION_UNKNOWN, field,
        f"{what} has no rule set here (supported: {', '.join(SUPPORTED_VERSIONS)}); judged by vLLM {chosen}'s "
        "rules, which may differ from what the pod runs: pin a supported release or set spec.vllmVersion",
        Stage.SPEC)]
