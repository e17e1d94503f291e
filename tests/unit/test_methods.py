"""The method table (specdeploy.vllm.methods) as a user meets it: every name a supported release
accepts is accepted and resolved as vLLM resolves it, per-release facts come from the release's
data, and the CRD says what the table says."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml

from specdeploy.api.crd import crd
from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.geometry import Models, read_geometry
from specdeploy.pipeline import ModelInputs, evaluate
from specdeploy.validation.speculative_tokens import resolve_num_speculative_tokens
from specdeploy.vllm import SUPPORTED_VERSIONS, VllmFacts, rule_set
from specdeploy.vllm.methods import METHODS, accepted_names, aliases, drafting, method_named
from tests.conftest import load_config

V3 = "deepseek-ai__DeepSeek-V3"
OLDEST, NEWEST = SUPPORTED_VERSIONS[0], SUPPORTED_VERSIONS[-1]


def _mtp(method: str, version: str):
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "deepseek-ai/DeepSeek-V3"}, "vllmVersion": version,
        "draft": {"method": method, "numSpeculativeTokens": 1}, "parallelism": {"tensorParallelSize": 8}})
    return evaluate(spec, ModelInputs(load_config(V3)), None)


def test_deepseek_mtp_on_deepseek_v3_is_planned_as_mtp_as_every_release_rewrites_it() -> None:
    for version in SUPPORTED_VERSIONS:
        evaluation = _mtp("deepseek_mtp", version)
        assert evaluation.ok, [f.message for f in evaluation.findings]
        assert evaluation.plan.method == "mtp" and evaluation.speculative_config["method"] == "mtp"


def test_an_alias_only_a_newer_release_has_is_refused_by_the_older_one() -> None:
    """Every release's MTPModelTypes is its own: a name the oldest release lacks is its refusal."""
    newer_only = sorted(set(rule_set(NEWEST).mtp_model_types) - set(rule_set(OLDEST).speculative_methods))
    assert newer_only, "the releases' MTP names no longer differ: pick another witness"
    assert newer_only[0] in accepted_names()
    assert "method-unsupported" in {f.code for f in _mtp(newer_only[0], OLDEST).findings}
    assert _mtp(newer_only[0], NEWEST).ok


def test_every_mtp_name_of_every_release_resolves_to_the_target_mtp_method() -> None:
    for version in SUPPORTED_VERSIONS:
        facts = rule_set(version)
        for name in facts.mtp_model_types & facts.speculative_methods:
            assert method_named(name).target_mtp_layers, name
    assert set(aliases()) & set(METHODS) == set()


def test_the_crd_description_and_cel_rules_come_from_the_table() -> None:
    """draft.method is a bounded name (a plugin's may be any): its description lists every name the
    table knows and says which releases take others."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["draft"]
    method = schema["properties"]["method"]
    assert "enum" not in method and method["maxLength"] == 64
    assert all(name in method["description"] for name in accepted_names())
    assert all(version in method["description"] for version in SUPPORTED_VERSIONS if rule_set(version).plugin_methods)
    rules = " ".join(r["rule"] for r in schema["x-kubernetes-validations"])
    assert all(f"'{name}'" in rules for name in accepted_names() if method_named(name).draft != "optional")
    assert yaml.safe_dump(crd())  # still one YAML document


def test_suffixs_default_k_is_the_releases_data_not_a_constant() -> None:
    """k defaults to the tree-depth option (its default read from the release's generated data),
    capped where the release caps it (0.34.0: min(8, depth), also data)."""
    llama = load_config("meta-llama__Llama-3.1-8B-Instruct")
    for version in SUPPORTED_VERSIONS:
        facts = rule_set(version)
        spec = SpeculativeDeploymentSpec.model_validate({"target": {"model": "org/t"}, "vllmVersion": version,
                                                         "draft": {"method": "suffix"}})
        depth = facts.option_default("suffix_decoding_max_tree_depth")
        cap = facts.default_k_cap("suffix")
        assert evaluate(spec, ModelInputs(llama), None).plan.num_speculative_tokens == (min(cap, depth) if cap else depth)
    assert rule_set(OLDEST).default_k_cap("suffix") is None and rule_set(NEWEST).default_k_cap("suffix")
    data = json.loads(resources.files("specdeploy.vllm").joinpath("data", f"{OLDEST}.json").read_text())
    data["speculative_config_fields"]["suffix_decoding_max_tree_depth"]["default"] = 5
    target, _ = read_geometry(llama, "t", rule_set(OLDEST))
    spec = SpeculativeDeploymentSpec.model_validate({"target": {"model": "org/t"}, "draft": {"method": "suffix"}})
    assert resolve_num_speculative_tokens(spec, Models(target, None), VllmFacts(data))[0] == 5


@pytest.mark.parametrize("method, key, value, refused", [
    ("eagle3", "dspark_draft_topk", 4, True),
    ("eagle3", "use_heterogeneous_vocab", False, False),  # the field's default: vLLM takes it
    ("eagle3", "use_heterogeneous_vocab", True, True),
    ("draft_model", "use_heterogeneous_vocab", True, False),
])
def test_options_only_one_method_takes_are_refused_with_the_others(method, key, value, refused) -> None:
    draft = "specforge__llama3-8B-eagle3" if method == "eagle3" else "meta-llama__Llama-3.2-1B-Instruct"
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "org/t"}, "vllmVersion": OLDEST,
        "draft": {"method": method, "model": "org/d", "numSpeculativeTokens": 3, "speculativeConfig": {key: value}}})
    evaluation = evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), ModelInputs(load_config(draft)))
    found = [f for f in evaluation.findings if f.code == "speculative-config-method" and f.field.endswith(key)]
    assert bool(found) == refused


def test_telemetry_reads_how_a_method_drafts_from_the_table() -> None:
    assert drafting("deepseek_mtp") == drafting("mtp") == "sequential"
    assert {drafting(m) for m in METHODS} == {"sequential", "parallel", "lookup"}
    assert drafting(None) is None and drafting("no-such-method") is None


def test_ngram_gpu_is_planned_like_the_cpu_lookup_with_its_own_name() -> None:
    """vLLM's GPU n-gram lookup (NgramGPUSpeculator): no draft model, no draft KV cache, free drafts,
    prompt_lookup_min <= prompt_lookup_max."""
    spec = SpeculativeDeploymentSpec.model_validate({
        "target": {"model": "org/t"}, "draft": {"method": "ngram_gpu", "numSpeculativeTokens": 4},
        "resources": {"gpu": {"product": "H100-80GB"}}})
    evaluation = evaluate(spec, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), None)
    assert evaluation.ok and evaluation.speculative_config["method"] == "ngram_gpu"
    assert all(layer.model != "draft" for layer in evaluation.plan.memory.layers) and drafting("ngram_gpu") == "lookup"
    bad = spec.model_copy(update={"draft": spec.draft.model_copy(update={"speculative_config": {"prompt_lookup_min": 5, "prompt_lookup_max": 2}})})
    assert "speculative-config-combination" in {f.code for f in evaluate(bad, ModelInputs(load_config("meta-llama__Llama-3.1-8B-Instruct")), None).findings}
    with pytest.raises(ValueError, match="uses no draft model"):
        SpeculativeDeploymentSpec.model_validate({"target": {"model": "org/t"}, "draft": {"method": "ngram_gpu", "model": "org/d"}})


def test_the_records_say_what_each_0_34_speculator_class_declares() -> None:
    """The record's fields named after vLLM 0.34.0's SpeculatorConfig class attributes
    (v1/worker/gpu/spec_decode/speculator_config.py) hold what each method's class declares,
    as the refresh script reads them into the data (`speculators.classes`)."""
    facts, checked = rule_set(NEWEST), []
    for method, record in METHODS.items():
        declared = facts.speculator(method)
        if declared is None:
            continue  # no class of its own in this release (medusa, mlp_speculator, custom_class)
        assert (record.uses_target_hidden_states, record.parallel_drafting, record.draft_has_own_vocab) == \
            (declared["uses_target_hidden_states"], declared["parallel_drafting"], declared["draft_has_own_vocab"]), method
        checked.append(method)
    assert {"eagle", "eagle3", "mtp", "dflash", "dspark", "draft_model", "ngram", "suffix", "extract_hidden_states"} <= set(checked)
