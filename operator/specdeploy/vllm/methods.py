"""vLLM's speculative methods: one record per method, the one place that says how each drafts.

Every other layer asks this table (`method_named(name).uses_target_hidden_states`, ...) and never names a method.
A record holds what is the same in every supported release; what a release changes is that
release's: which names it accepts (`VllmFacts.speculative_methods`), its MTP aliases
(`VllmFacts.mtp_model_types`), option defaults (`VllmFacts.speculative_fields`) and its
per-method speculator facts (`VllmFacts.speculator`). Adding a method: one record here (the CRD's
enum and prose are generated from it: `make crd`).

Sources, per field: vllm/config/speculative.py (SpeculativeConfig.__post_init__, use_eagle(),
_verify_args), v1/worker/gpu/spec_decode/<method>/ (how the draft is loaded and proposes), in
0.32.0 and 0.33.0 alike. Fields that a 0.34.0 speculator class declares carry its name
(vllm/v1/worker/gpu/spec_decode/speculator_config.py `SpeculatorConfig`: uses_target_hidden_states,
parallel_drafting, draft_has_own_vocab, proposes_draft_tokens,
adaptive_verification_uses_draft_logits); tests/unit/test_methods.py checks them against each
method's class in the 0.34.0 data.

A name the table does not know is not refused here: from 0.34.0 a vLLM plugin in the image may
register it (`register_speculative_method`). `method_named` gives it `unlisted_method`, a record
that plans generically and conservatively; whether the release may take it at all is the
release's (`VllmFacts.plugin_methods`, judged in validation/rules.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from specdeploy.findings import near_misses
from specdeploy.vllm.facts import VllmFacts
from specdeploy.vllm.versions import SUPPORTED_VERSIONS, rule_set

DraftNeed = Literal["none", "optional", "required"]
# How a draft proposes its k tokens: one model pass per position, all positions in one pass
# (`parallel_drafting`, set by __post_init__ for dflash/dspark), or a lookup in the tokens so far.
Drafting = Literal["sequential", "parallel", "lookup"]
# Where k comes from when numSpeculativeTokens is unset (__post_init__): a draft-config field
# (`n_predict`, dspark's `block_size`), the target's MTP layers (`n_predict` of the MTP config
# vLLM derives), a SpeculativeConfig option, or nowhere (k is required).
KSource = Literal["n_predict", "block_size", "mtp_layers", "option", "none"]


@dataclass(frozen=True)
class Method:
    """How vLLM builds and runs one speculative method."""

    name: str
    summary: str  # for the CRD's description of `draft.method`
    draft: DraftNeed  # whether draft.model is needed
    # Without draft.model, vLLM drafts from the target checkpoint (when k is set): __post_init__
    # sets `model` to the target's for mtp and dspark.
    target_as_draft: bool = False
    # The draft is the target's own MTP layers (hf_config_override builds the MTP config).
    target_mtp_layers: bool = False
    # ModelConfig.verify_with_parallel_config passes PP for the target, but vLLM builds the draft
    # at PP 1; methods that share the target's weights cannot run under PP (vllm-facts.md §1.8).
    pipeline_parallel: bool = True
    # The draft's parallel layers split at the target's TP whatever draft_tensor_parallel_size
    # says: they read the global TP group (get_tensor_model_parallel_world_size()). eagle/utils.py
    # load_eagle_model builds with the target's VllmConfig; dspark/utils.py load_dspark_model and
    # standalone_ar/speculator.py StandaloneARSpeculator.load_draft_model pass a parallel_config
    # with the draft TP, which no layer reads.
    built_at_target_tp: bool = True
    # Drafts on the target's hidden states: SpeculatorConfig.uses_target_hidden_states (0.34.0;
    # SpeculativeConfig.use_eagle() before, "a stand-in for speculative decoding using target
    # model hidden states").
    uses_target_hidden_states: bool = False
    # Borrows the target's embedding and lm_head unless it ships different ones
    # (eagle/utils.py maybe_share_target_embed and the lm_head share).
    shares_target_embeddings: bool = False
    # Allocates a KV cache of its own (MLP heads and lookups keep none).
    keeps_draft_kv_cache: bool = True
    drafting: Drafting = "sequential"
    k_source: KSource = "n_predict"
    # For k_source "option": the SpeculativeConfig option whose value k defaults to.
    k_option: str | None = None
    # The draft config's model_type vLLM requires (mlp_speculator) or writes itself (medusa).
    draft_model_type: str | None = None
    forces_draft_model_type: bool = False
    # _verify_and_get_draft_tp: unset draft TP is 1 for this draft (MLPSpeculator), else the target's.
    draft_tp_defaults_to_one: bool = False
    # The draft has its own vocabulary, which must be the target's: SpeculatorConfig.draft_has_own_vocab
    # (0.34.0; verify_equal_vocab_size_if_draft_model before).
    draft_has_own_vocab: bool = False
    # Builds a DSpark head (models/qwen3_dspark.py, deepseek_v4/nvidia/dspark.py).
    builds_dspark_head: bool = False
    # SpeculativeConfig options vLLM refuses with any other method.
    exclusive_options: frozenset[str] = frozenset()
    # Options vLLM range-checks for this method: (option, lowest, highest or None).
    option_ranges: tuple[tuple[str, float, float | None], ...] = ()
    # Two options vLLM requires in order (low <= high).
    ordered_options: tuple[str, str] | None = None
    # Adaptive verification reads the draft logits (not dspark, which has its own confidence head):
    # SpeculatorConfig.adaptive_verification_uses_draft_logits (0.34.0).
    adaptive_verification_uses_draft_logits: bool = True
    # A package the image must carry for this method (None: vLLM's own code).
    needs_package: str | None = None
    # What the method runs is code in the image that no rule here can read (a class the draft
    # model names, a plugin's speculator): only a preflight of that image can judge it.
    judged_only_in_image: bool = False
    # draft.model names a Python class (a dotted import path), not a checkpoint to read.
    model_names_class: bool = False
    # Proposes draft tokens (0.34.0 SpeculatorConfig.proposes_draft_tokens): a method that does
    # not (extract_hidden_states) cannot speed decoding up, whatever its acceptance counters say.
    proposes_draft_tokens: bool = True
    # The one k vLLM runs the method with (None: any k from 1).
    fixed_k: int | None = None
    # Keys vLLM's speculator reads from the target's config.json with no default.
    target_config_keys: tuple[str, ...] = ()
    # Caches the target's hidden states in a cache-only layer (models/extract_hidden_states.py).
    keeps_hidden_state_cache: bool = False
    # SpeculativeConfig options the method's speculator takes at one value only; it raises at
    # start-up (on the GPU's model runner) for any other.
    fixed_options: tuple[tuple[str, Any], ...] = ()

    @property
    def parallel_drafting(self) -> bool:
        """All k positions in one forward pass: SpeculatorConfig.parallel_drafting (0.34.0)."""
        return self.drafting == "parallel"

    def k_source_name(self) -> str:
        """The field k defaults from, for messages."""
        return self.k_option or self.k_source


_NGRAM_DEFAULTS = dict(draft="none", keeps_draft_kv_cache=False, drafting="lookup", k_source="none",
                       ordered_options=("prompt_lookup_min", "prompt_lookup_max"))

METHODS: dict[str, Method] = {m.name: m for m in (
    Method("eagle", "an EAGLE head on the target's hidden states", "required",
           uses_target_hidden_states=True, shares_target_embeddings=True),
    Method("eagle3", "an EAGLE-3 head on the target's hidden states", "required",
           uses_target_hidden_states=True, shares_target_embeddings=True),
    Method("mtp", "the target's own MTP layers", "optional", target_as_draft=True, target_mtp_layers=True,
           pipeline_parallel=False, uses_target_hidden_states=True, k_source="mtp_layers",
           exclusive_options=frozenset({"index_share_for_mtp_iteration"})),
    Method("draft_model", "a smaller model of the target's vocabulary", "required", draft_has_own_vocab=True,
           exclusive_options=frozenset({"use_heterogeneous_vocab"})),
    Method("dflash", "a DFlash block drafter", "required", uses_target_hidden_states=True, shares_target_embeddings=True,
           drafting="parallel"),
    Method("dspark", "a DSpark block drafter, or without draft.model the DSpark head inside the target "
           "checkpoint (DeepSeek-V4)", "optional", target_as_draft=True, pipeline_parallel=False,
           uses_target_hidden_states=True, shares_target_embeddings=True, drafting="parallel", k_source="block_size",
           builds_dspark_head=True, exclusive_options=frozenset({"dspark_draft_topk"}),
           adaptive_verification_uses_draft_logits=False),
    Method("ngram", "prompt lookup on the CPU", **_NGRAM_DEFAULTS),  # type: ignore[arg-type]
    # v1/worker/gpu/spec_decode/ngram/speculator.py NgramGPUSpeculator: the same lookup in a GPU kernel.
    Method("ngram_gpu", "prompt lookup on the GPU", **_NGRAM_DEFAULTS),  # type: ignore[arg-type]
    Method("medusa", "Medusa heads", "required", keeps_draft_kv_cache=False, draft_model_type="medusa",
           forces_draft_model_type=True),
    Method("mlp_speculator", "an MLPSpeculator", "required", keeps_draft_kv_cache=False,
           draft_model_type="mlp_speculator", draft_tp_defaults_to_one=True),
    # 0.32.0/0.33.0 __post_init__: `model` names a proposer class by its dotted import path
    # (_is_custom_proposer_path); vLLM imports it at start-up. 0.34.0 dropped it for plugins.
    Method("custom_class", "a proposer class of the image, named by draft.model as a dotted import path", "required",
           keeps_draft_kv_cache=False, k_source="none", judged_only_in_image=True, model_names_class=True),
    # __post_init__ builds the draft config from the target's (ExtractHiddenStatesConfig); its
    # speculator (v1/worker/gpu/spec_decode/extract_hidden_states.py, 0.34.0 also
    # extract_hidden_states_config.py proposes_draft_tokens=False) caches the target's hidden
    # states for a KV connector, requires k 1, greedy draft sampling and the target config's
    # eagle_aux_hidden_state_layer_ids (planning/kv_cache.py counts its hidden-state cache).
    Method("extract_hidden_states", "no drafting: caches the target's hidden states for a KV connector", "none",
           keeps_draft_kv_cache=False, k_source="none", proposes_draft_tokens=False, fixed_k=1,
           target_config_keys=("eagle_aux_hidden_state_layer_ids",), keeps_hidden_state_cache=True,
           fixed_options=(("draft_sample_method", "greedy"),)),
    Method("suffix", "suffix decoding over the prompts and outputs seen", "none", keeps_draft_kv_cache=False,
           drafting="lookup", k_source="option", k_option="suffix_decoding_max_tree_depth",
           option_ranges=(("suffix_decoding_max_tree_depth", 1, None), ("suffix_decoding_max_cached_requests", 0, None),
                          ("suffix_decoding_max_spec_factor", 0, None), ("suffix_decoding_min_token_prob", 0, 1),
                          # 0.34.0 suffix/config.py: in [0, 2**31) (a key only 0.34.0 has)
                          ("suffix_decoding_corpus_tokens", 0, (1 << 31) - 1)),
           needs_package="arctic-inference"),
)}


@lru_cache(maxsize=None)
def aliases() -> dict[str, str]:
    """Every other name a supported release accepts for a method -> the method: __post_init__
    rewrites each MTPModelTypes member (deepseek_mtp, qwen3_next_mtp, ...) to mtp."""
    target_mtp = next(m.name for m in METHODS.values() if m.target_mtp_layers)
    out: dict[str, str] = {}
    for version in SUPPORTED_VERSIONS:
        facts = rule_set(version)
        out.update({name: target_mtp for name in facts.mtp_model_types & facts.speculative_methods
                    if name not in METHODS})
    return dict(sorted(out.items()))


def plugin_releases() -> tuple[str, ...]:
    """The supported releases whose plugins may register methods (`VllmFacts.plugin_methods`)."""
    return tuple(version for version in SUPPORTED_VERSIONS if rule_set(version).plugin_methods)


def accepted_names() -> tuple[str, ...]:
    """What `draft.method` may say: the methods, then their aliases."""
    return tuple(METHODS) + tuple(aliases())


def is_listed(name: str) -> bool:
    """The table knows this name, as a method or an alias."""
    return name in METHODS or name in aliases()


def misspelled(name: str) -> list[str]:
    """The listed names `name` is a typo of (within two edits, case ignored): a name a plugin
    registers must be its own, not one letter off a built-in method."""
    return near_misses(name, accepted_names())


@lru_cache(maxsize=64)
def unlisted_method(name: str) -> Method:
    """A method the table does not know (a plugin's): planned as the most a draft may cost — a
    draft model optional, built at the target's TP, with a KV cache of its own, k given."""
    return Method(name, "a method a plugin in the image registers", "optional", k_source="none",
                  judged_only_in_image=True)


def method_named(name: str) -> Method:
    """The record for a method or one of its aliases; `unlisted_method` for any other name."""
    canonical = aliases().get(name, name)
    return METHODS[canonical] if canonical in METHODS else unlisted_method(name)


def drafting(name: str | None) -> Drafting | None:
    """How a method drafts (None for no method or a name the table does not know)."""
    return method_named(name).drafting if name is not None and is_listed(name) else None


def methods_where(with_aliases: bool = True, **wanted: Any) -> tuple[str, ...]:
    """Every accepted name (aliases too, unless `with_aliases` is False) whose record has these
    field values."""
    names = accepted_names() if with_aliases else tuple(METHODS)
    return tuple(name for name in names if all(getattr(method_named(name), key) == value for key, value in wanted.items()))


def default_k(method: Method, options: dict[str, Any], facts: VllmFacts) -> int | None:
    """k when numSpeculativeTokens is unset and k comes from an option: the option as given, else
    the release's default for it (suffix: 24 in 0.32/0.33, from the generated data), capped where
    the release caps it (0.34.0 suffix/config.py: min(8, depth), from the data too)."""
    if method.k_source != "option" or method.k_option is None:
        return None
    value = options.get(method.k_option, facts.option_default(method.k_option))
    if value is None:
        return None
    cap = facts.default_k_cap(method.name)
    return min(cap, int(value)) if cap else int(value)


def built_draft_tp(method: Method, tp: int, draft_tp: int | None) -> int | None:
    """The TP the draft's layers split at (None: no draft model)."""
    if draft_tp is None:
        return None
    return tp if method.built_at_target_tp else draft_tp
