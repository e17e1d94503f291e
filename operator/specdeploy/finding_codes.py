"""Every finding code specdeploy reports, in one place: its severity, the field it names, and
what it means.

Finding codes are the project's most public output (CLI JSON, `status.findings`, Events, the
`specdeploy_findings` metric), so, like condition reasons (api/conditions.py), they are named
once. `findings.Finding` refuses a code this catalogue does not hold, or a severity its entry
does not allow; `docs/findings.md` is generated from it (`scripts/gen_findings_doc.py`), and
tests/unit/test_finding_catalogue.py reaches every code through the public pipeline. To add a
code: one entry here, then `make findings-doc`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Stage(str, Enum):
    SPEC = "spec"  # the CR itself: schema, extra args, rule-set choice
    CONFIG = "config"  # a model's config.json as vLLM parses it
    PAIR = "pair"  # draft vs target, k, and the layout rules vLLM's config check runs
    LOAD = "load"  # what fails only when vLLM builds the models
    PLAN = "plan"  # our layout search: GPUs, nodes, memory fit


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO
SPEC_CONFIG: Final = "spec.draft.speculativeConfig"
EXTRA_ARGS: Final = "spec.vllm.extraArgs[i]"


@dataclass(frozen=True)
class Code:
    """One finding code: `field` is the spec path its findings name (`<key>` a placeholder)."""

    name: str
    severity: Severity
    field: str
    meaning: str
    # A second severity the same verdict may take (model-cache-too-small: a warning on the default).
    also: Severity | None = None

    @property
    def severities(self) -> frozenset[Severity]:
        return frozenset({self.severity} | ({self.also} if self.also else set()))


# (heading, codes): docs/findings.md's sections, in the order `pipeline.evaluate` runs.
GROUPS: tuple[tuple[str, tuple[Code, ...]], ...] = (
    ("The object and its spec", (
        Code("object-invalid", E, "apiVersion | kind | metadata | metadata.<key> | <a top-level key>",
             "the object around the spec is not a SpeculativeDeployment: apiVersion, kind, metadata, an unknown top-level key, a name given twice in one stream (an empty field: the document is no mapping)"),
        Code("object-too-large", E, "spec.<the largest field>", "the object is larger than the API server stores"),
        Code("spec-invalid", E, "spec | spec.<field>", "a spec field has the wrong type, value or name (the schema's refusal, in our words)"),
        Code("image-invalid", E, "spec.image", "spec.image is not an image reference a container runtime can pull"),
        Code("method-misspelled", E, "spec.draft.method", "spec.draft.method is one edit or two from a method vLLM knows"),
        Code("vllm-version-unknown", W, "spec.vllmVersion | spec.image", "no rule set of this release: the nearest supported release's rules judge"),
        Code("extra-arg-unknown-flag", E, EXTRA_ARGS, "a flag the judging release's `vllm serve` does not have"),
        Code("extra-arg-owned-by-plan", E, EXTRA_ARGS, "a flag the operator sets from the spec and the plan (TP, the speculative config, ...)"),
        Code("extra-arg-missing-value", E, EXTRA_ARGS, "a flag that takes a value is the last item"),
        Code("extra-arg-unexpected-value", E, EXTRA_ARGS, "a value where the flag takes none, or an item that is no flag"),
        Code("extra-arg-invalid-choice", E, EXTRA_ARGS, "a value outside the flag's choices in the judging release"),
        Code("extra-arg-joined", E, EXTRA_ARGS, "a flag and its value (or several args) in one item: no shell splits extraArgs"),
        Code("speculative-config-unknown-key", E, f"{SPEC_CONFIG}.<key>", "a SpeculativeConfig key the judging release does not have"),
        Code("speculative-config-owned-key", E, f"{SPEC_CONFIG}.<key>", "a SpeculativeConfig key the operator writes from the spec (model, method, k, TP, ...)"),
        Code("speculative-config-type", E, f"{SPEC_CONFIG}.<key>", "a SpeculativeConfig value of the wrong type"),
        Code("speculative-config-range", E, f"{SPEC_CONFIG}.<key>", "a SpeculativeConfig value outside the range vLLM allows"),
        Code("speculative-config-method", E, f"{SPEC_CONFIG}.<key>", "a SpeculativeConfig option the method (or its speculator) does not take"),
        Code("speculative-config-combination", E, f"{SPEC_CONFIG}.<key>", "two SpeculativeConfig values vLLM refuses together, or one it refuses with this k"),
    )),
    ("A model's config.json", (
        Code("config-invalid", E, "spec.target.<source> | spec.draft.<source>", "no usable config.json where the spec points: not JSON, not an object, too large or deep, no such repo or path, a gated repo without a token"),
        Code("config-unavailable", E, "spec.target.<source> | spec.draft.<source>", "the config could not be read now (the Hub, the API server): nothing is judged, and the operator retries"),
        Code("config-not-object", E, "spec.target.config | spec.draft.config", "config.json is not a JSON object"),
        Code("config-rejected", E, "spec.target.config.<key> | spec.draft.config.<key>", "transformers' (or vLLM's) config class refuses the config"),
        Code("config-missing-field", E, "spec.target.config.<key> | spec.draft.config.<key>", "a field vLLM reads with no default (heads, layers, widths) is missing"),
        Code("config-value-invalid", E, "spec.target.config.<key> | spec.draft.config.<key>", "a config value of the wrong type or outside the bounds a real checkpoint has"),
        Code("draft-config-missing", E, "spec.draft.config", "the method needs the draft's config and none was given or found"),
    )),
    ("The pair, k, and the layout rules of vLLM's config check", (
        Code("method-unsupported", E, "spec.draft.method", "the judging release has no such speculative method"),
        Code("method-needs-preflight", W, "spec.draft.method", "a method only the image's own vLLM can judge (a plugin's, a proposer class): a preflight decides"),
        Code("target-architecture-unsupported", E, "spec.target.config.architectures", "vLLM cannot load the target's architecture"),
        Code("mtp-target-without-mtp-layers", E, "spec.draft.method", "method mtp on a target whose config declares no MTP layers"),
        Code("mtp-unsupported-target", E, "spec.draft.method", "method mtp on a target whose MTP layers vLLM has no draft model for"),
        Code("mtp-no-layers", E, "spec.draft.method", "method mtp on a target that declares 0 MTP layers"),
        Code("draft-architecture-unsupported", E, "spec.draft.config.architectures", "vLLM cannot load the draft's architecture for this method"),
        Code("dspark-not-a-dspark-draft", W, "spec.draft.config.architectures", "a dspark draft that vLLM will load as DeepSeek-V4's in-checkpoint DSpark head"),
        Code("draft-not-mlp-speculator", E, "spec.draft.config.model_type", "the method needs a draft of one model_type (mlp_speculator) and the draft is another"),
        Code("heterogeneous-vocab", I, f"{SPEC_CONFIG}.use_heterogeneous_vocab", "draft and target vocabularies differ and use_heterogeneous_vocab maps them"),
        Code("vocab-mismatch", E, "spec.draft.config.vocab_size", "the method needs the target's vocabulary and the draft's differs"),
        Code("max-model-len-too-long", E, "spec.serving.maxModelLen", "maxModelLen exceeds what the target's config allows"),
        Code("speculative-max-model-len", E, f"{SPEC_CONFIG}.max_model_len", "the draft's context is shorter than the context served"),
        Code("method-checkpoint-mismatch", E, "spec.draft.method", "the draft checkpoint declares a speculator of another method"),
        Code("target-config-key-missing", E, "spec.target.config.<key>", "the method's speculator reads a key from the target's config that it lacks"),
        Code("suffix-needs-arctic-inference", W, "spec.draft.method", "method suffix needs the arctic-inference package in the image"),
        Code("k-default", I, "spec.draft.numSpeculativeTokens", "k was not set: the value vLLM defaults it to"),
        Code("k-auto", I, "spec.draft.numSpeculativeTokens", "k is auto: the value in force and why"),
        Code("k-required", E, "spec.draft.numSpeculativeTokens", "the method has no default k: it must be set"),
        Code("k-not-multiple-of-n-predict", E, "spec.draft.numSpeculativeTokens", "k must be a multiple of the draft's n_predict"),
        Code("k-fixed-by-method", E, "spec.draft.numSpeculativeTokens", "the method runs with one k only"),
        Code("target-heads-tp", E, "spec.parallelism.tensorParallelSize", "the target's attention heads do not split over this TP"),
        Code("target-kv-heads-tp", E, "spec.parallelism.tensorParallelSize", "the target's KV heads neither split nor replicate over this TP"),
        Code("draft-heads-tp", E, "spec.draft.tensorParallelSize", "the draft's attention heads do not split over its TP"),
        Code("draft-kv-heads-tp", E, "spec.draft.tensorParallelSize", "the draft's KV heads neither split nor replicate over its TP"),
        Code("draft-tp-choice", E, "spec.draft.tensorParallelSize", "the draft's TP is neither 1 nor the target's"),
        Code("pipeline-parallel-method", E, "spec.parallelism.pipelineParallelSize", "the method cannot run under pipeline parallelism"),
        Code("pipeline-parallel-architecture", E, "spec.parallelism.pipelineParallelSize", "the target's architecture has no pipeline parallelism in vLLM"),
        Code("pipeline-parallel-layers", E, "spec.parallelism.pipelineParallelSize", "more pipeline stages than the target has layers"),
    )),
    ('What fails only when vLLM builds the models', (
        Code("target-load-fails", E, "spec.parallelism.tensorParallelSize", "vLLM accepts the TP but cannot build the target at it (a size its layers divide by TP)"),
        Code("draft-load-fails", E, "spec.draft.tensorParallelSize | spec.parallelism.tensorParallelSize | spec.draft.config.<key> | spec.target.config.<key> | spec.draft.speculativeConfig.<key>",
             "vLLM accepts the config but cannot build the draft (at this TP, from this config, with this option)"),
        Code("draft-tp-not-honoured", W, "spec.draft.tensorParallelSize", "vLLM builds this draft at the target's TP whatever draft TP says"),
    )),
    ('The layout search: GPUs, nodes, memory', (
        Code("gpu-unknown", E, "spec.resources.gpu.product", "a GPU product the catalogue does not know"),
        Code("memory-not-checked", I, "spec.resources.gpu", "no GPU product given: the plan does not check memory"),
        Code("memory-does-not-fit", E, "spec.resources.gpu", "the weights, KV cache and activations do not fit the GPUs of the chosen layout"),
        Code("layout-node-split", E, "spec.resources.gpu.perNode", "the layout needs more GPUs than one node has, in a way vLLM cannot split"),
        Code("no-layout", E, "spec.parallelism | spec.parallelism.pipelineParallelSize", "no TP/PP layout passes the rules"),
        Code("image-accelerator-mismatch", E, "spec.image", "the image is built for another accelerator than the GPU product's"),
        Code("gpu-resource-misspelled", E, "spec.resources.gpu.resourceName", "no GPU device plugin's resource name"),
        Code("gpu-resource-vendor-mismatch", E, "spec.resources.gpu.resourceName", "a device plugin's resource of another vendor than the GPU product's"),
        Code("rollout-canary-multi-node", E, "spec.rollout.strategy", "strategy Canary on a plan whose replica spans nodes (a LeaderWorkerSet has no canary)"),
        Code("model-cache-too-small", E, "spec.modelCache.sizeLimit", "the model cache emptyDir cannot hold the weights (a warning on the default sizeLimit)", also=W),
    )),
    ("The image's own vLLM (the preflight Job)", (
        Code("preflight-refused", E, "spec", "the fast rules accepted, the image's own vLLM refused the exact args"),
    )),
)
_ENTRIES = tuple(entry for _, entries in GROUPS for entry in entries)

CATALOGUE: Final[dict[str, Code]] = {c.name: c for c in _ENTRIES}
assert len(CATALOGUE) == len(_ENTRIES), "a finding code is catalogued twice"


def catalogued(name: str) -> Code:
    """The catalogue's entry (KeyError names the code and where to add it)."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise KeyError(f"finding code {name!r} is not in specdeploy/finding_codes.py: add it there") from None
