"""The finding catalogue (specdeploy/finding_codes.py) is the one list of codes: every code the
source builds is in it, an uncatalogued code cannot be built, docs/findings.md is what the
catalogue generates, and every catalogued code is reached by an input through the public
pipeline (`plan -f`'s plan_stream, `pipeline.evaluate`, the operator's preflight gate)."""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from specdeploy.finding_codes import CATALOGUE
from specdeploy.findings import Severity, error, info, warning

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "specdeploy"
FIXTURES = REPO / "tests" / "fixtures"
# The calls that build a finding from a code given as their first argument.
BUILDERS = {"error", "warning", "info", "make", "_spec_error", "Finding", "PydanticCustomError"}
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")


# ---- every code in use is catalogued ---------------------------------------------------------

def _module_constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}


def _all_constants() -> dict[str, str]:
    """NAME -> string of every module-level string constant (codes are imported by name)."""
    out: dict[str, str] = {}
    for path in PACKAGE.rglob("*.py"):
        out.update(_module_constants(ast.parse(path.read_text())))
    return out


def codes_in_source(root: Path = PACKAGE) -> dict[str, list[str]]:
    """code (or f-string pattern) -> where it is built: the first argument of every finding
    builder, resolved through module constants, and every `"code": ...` of a dict literal."""
    constants = _all_constants()
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        local = {**constants, **_module_constants(tree)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILDERS and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.setdefault(arg.value, []).append(where)
                elif isinstance(arg, ast.Name) and arg.id in local:
                    found.setdefault(local[arg.id], []).append(where)
                elif isinstance(arg, ast.JoinedStr):
                    found.setdefault(ast.unparse(arg), []).append(where)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value == "code" and isinstance(value, ast.Constant) \
                            and isinstance(value.value, str):
                        found.setdefault(f"dict literal {value.value!r}", []).append(where)
    return found


def _fstring_codes(pattern: str) -> list[str]:
    """The catalogued codes an f-string code such as f'{who}-heads-tp' can build."""
    tail = re.sub(r"^f'\{\w+\}|'$", "", pattern)
    return [c for c in CATALOGUE if c.endswith(tail) and c != tail.lstrip("-")]


def uncatalogued(found: dict[str, list[str]]) -> list[str]:
    out = []
    for code, where in sorted(found.items()):
        if code.startswith("f'"):
            if not _fstring_codes(code):
                out.append(f"{code} at {where[0]}: no catalogued code ends so")
        elif code.startswith("dict literal") or KEBAB.match(code) and code not in CATALOGUE:
            out.append(f"{code} at {where[0]}: build it as a Finding from the catalogue")
    return out


def test_every_code_the_source_builds_is_catalogued() -> None:
    found = codes_in_source()
    assert uncatalogued(found) == [], "finding codes outside specdeploy/finding_codes.py"
    # The scan sees the builders: most codes are literal first arguments.
    assert len([c for c in found if c in CATALOGUE]) >= 60


def test_the_scan_refuses_a_code_the_catalogue_lacks(tmp_path: Path) -> None:
    """The guard can fail: a module that builds an uncatalogued code, or writes a finding as a dict."""
    (tmp_path / "rule.py").write_text(
        'from specdeploy.findings import error\n'
        'def rule():\n'
        '    return [error("draft-too-shy", "spec.draft", "...")]\n'
        'def legacy():\n'
        '    return {"code": "config-invalid", "severity": "error"}\n')
    problems = uncatalogued(codes_in_source(tmp_path))
    assert [p.split(" at ")[0] for p in problems] == ["dict literal 'config-invalid'", "draft-too-shy"]


def test_a_finding_is_built_only_from_a_catalogued_code_at_its_severity() -> None:
    with pytest.raises(KeyError, match="draft-too-shy"):
        error("draft-too-shy", "spec.draft", "...")
    with pytest.raises(ValueError, match="catalogued as warning"):
        error("vllm-version-unknown", "spec.image", "...")
    with pytest.raises(ValueError, match="catalogued as info"):
        error("k-auto", "spec.draft.numSpeculativeTokens", "...")
    assert info("k-auto", "spec.draft.numSpeculativeTokens", "k 3").severity is Severity.INFO
    # An error of guessed rules is reported as a warning (pipeline.Evaluation.as_guess).
    assert warning("no-layout", "spec.parallelism", "guessed by ...").severity is Severity.WARNING
    # model-cache-too-small is the one code with a second severity (the default sizeLimit warns).
    assert warning("model-cache-too-small", "spec.modelCache.sizeLimit", "...").code == "model-cache-too-small"


def test_docs_findings_md_is_what_the_catalogue_generates() -> None:
    spec = importlib.util.spec_from_file_location("gen_findings_doc", REPO / "scripts" / "gen_findings_doc.py")
    gen = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(gen)
    text = (REPO / "docs" / "findings.md").read_text()
    assert text == gen.render(), "docs/findings.md is stale: run `make findings-doc`"
    assert {m for m in re.findall(r"^\| `([a-z0-9-]+)` \|", text, re.M)} == set(CATALOGUE)


# ---- every catalogued code is reached through the public pipeline -----------------------------

def config(name: str) -> dict[str, Any]:
    for folder in ("model-configs", "synthetic"):
        path = FIXTURES / folder / f"{name}.json"
        if path.exists():
            return json.loads(path.read_text())
    raise KeyError(name)


LLAMA8, LLAMA1, LLAMA70 = "meta-llama__Llama-3.1-8B-Instruct", "meta-llama__Llama-3.2-1B-Instruct", "meta-llama__Llama-3.1-70B-Instruct"
QWEN8, QWEN06 = "Qwen__Qwen3-8B", "Qwen__Qwen3-0.6B"


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        base[key] = _merge(base.get(key, {}), value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return base


def cr(target: str | dict = LLAMA8, method: str = "ngram", with_draft: str | dict | None = None, k: Any = 3,
       **spec: Any) -> dict[str, Any]:
    """A SpeculativeDeployment with inline configs (a name: a fixture; a dict: the config)."""
    def inline(model: str | dict) -> dict:
        return copy.deepcopy(model) if isinstance(model, dict) else config(model)

    draft_spec: dict[str, Any] = {"method": method, **({"numSpeculativeTokens": k} if k is not None else {})}
    if with_draft is not None:
        draft_spec.update(model="org/draft", config=inline(with_draft))
    body = {"target": {"model": "org/target", "config": inline(target)}, "draft": draft_spec}
    return {"apiVersion": "specdeploy.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": "x"},
            "spec": _merge(body, spec)}


def edited(name: str, **changes: Any) -> dict[str, Any]:
    out = config(name)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


Reached = dict[str, set[str]]  # code -> the fields its findings named


def _reached(findings: Any) -> Reached:
    out: Reached = {}
    for f in findings:
        code, field = (f["code"], f["field"]) if isinstance(f, dict) else (f.code, f.field)
        out.setdefault(code, set()).add(field)
    return out


def plan_codes(*documents: dict[str, Any]) -> Reached:
    """What `specdeploy plan -f` reports for the stream (findings and unjudged)."""
    from specdeploy.stream import plan_stream

    report = plan_stream(yaml.safe_dump_all(documents), "test.yaml")
    return _reached(f for r in report.results for f in (*r.findings, *r.unjudged))


def evaluate_codes(spec: dict[str, Any], target: Any, draft: Any = None) -> Reached:
    """The codes `pipeline.evaluate` (what the operator and the CLI call) gives inputs sources never give."""
    from specdeploy.api.parse import parse_spec
    from specdeploy.geometry import ModelInputs
    from specdeploy.pipeline import evaluate

    parsed, findings = parse_spec(spec)
    assert parsed is not None, findings
    evaluation = evaluate(parsed, ModelInputs(target), ModelInputs(draft) if draft is not None else None)
    return _reached(evaluation.findings)


def preflight_codes() -> Reached:
    """The operator's preflight gate on the image's vLLM refusing the exact args."""
    from specdeploy.controller.reconcile.preflight_gate import decide
    from specdeploy.preflight.outcome import Outcome, parse_verdict
    from specdeploy.preflight.request import judge_request

    spec_doc = cr()["spec"]
    from specdeploy.api.parse import parse_spec
    from specdeploy.geometry import ModelInputs
    from specdeploy.pipeline import evaluate

    spec, _ = parse_spec(spec_doc)
    evaluation = evaluate(spec, ModelInputs(config(LLAMA8)), None)
    request = judge_request(spec, evaluation.plan, config(LLAMA8), None)
    verdict = parse_verdict(json.dumps({"ok": False, "stage": "config", "error": "ValueError: no", "vllmVersion": "0.34.0"}))
    decision = decide(Outcome("Refused", verdict), request, mode="Required", job="j", fast_version="0.34.0")
    return _reached(decision.findings)


def _configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


V32, V33, V34 = ({"vllmVersion": v} for v in ("0.32.0", "0.33.0", "0.34.0"))
H100 = {"resources": {"gpu": {"product": "H100-80GB"}}}
REACH: dict[str, Callable[[], Reached]] = {
    "object-invalid": lambda: plan_codes({**cr(), "apiVersion": "specdeploy.io/v9"}),
    "object-too-large": lambda: plan_codes(cr(target=edited(LLAMA8, padding="x" * (4 << 20)))),
    "spec-invalid": lambda: plan_codes(cr(replicas="two")),
    "image-invalid": lambda: plan_codes(cr(image="Vllm/vllm-openai:v0.34.0")),
    "method-misspelled": lambda: plan_codes(cr(method="ngarm")),
    "vllm-version-unknown": lambda: plan_codes(cr(vllmVersion="0.31.0")),
    "extra-arg-unknown-flag": lambda: plan_codes(cr(vllm={"extraArgs": ["--no-such-flag"]})),
    "extra-arg-owned-by-plan": lambda: plan_codes(cr(vllm={"extraArgs": ["--tensor-parallel-size", "2"]})),
    "extra-arg-missing-value": lambda: plan_codes(cr(vllm={"extraArgs": ["--max-num-seqs"]})),
    "extra-arg-unexpected-value": lambda: plan_codes(cr(vllm={"extraArgs": ["--enforce-eager", "true"]})),
    "extra-arg-invalid-choice": lambda: plan_codes(cr(vllm={"extraArgs": ["--dtype", "float64"]})),
    "extra-arg-joined": lambda: plan_codes(cr(vllm={"extraArgs": ["--max-num-seqs 64"]})),
    "speculative-config-unknown-key": lambda: plan_codes(cr(draft={"speculativeConfig": {"no_such_key": 1}})),
    "speculative-config-owned-key": lambda: plan_codes(cr(draft={"speculativeConfig": {"num_speculative_tokens": 3}})),
    "speculative-config-type": lambda: plan_codes(cr(draft={"speculativeConfig": {"prompt_lookup_max": "many"}})),
    "speculative-config-range": lambda: plan_codes(cr(method="suffix", draft={"speculativeConfig": {"suffix_decoding_max_tree_depth": 0}})),
    "speculative-config-method": lambda: plan_codes(cr(draft={"speculativeConfig": {"dspark_draft_topk": 3}})),
    "speculative-config-combination": lambda: plan_codes(cr(draft={"speculativeConfig": {"prompt_lookup_min": 5, "prompt_lookup_max": 2}})),
    "config-invalid": lambda: plan_codes(_configmap("cfg", {"config.json": "not json"}),
                                         {**cr(), "spec": {**cr()["spec"], "target": {"model": "org/t", "configMapRef": {"name": "cfg"}}}}),
    "config-unavailable": lambda: plan_codes({**cr(), "spec": {**cr()["spec"], "target": {"model": "org/t", "configMapRef": {"name": "absent"}}}}),
    "config-not-object": lambda: evaluate_codes(cr()["spec"], ["not", "an", "object"]),
    "config-rejected": lambda: plan_codes(cr(target=edited(LLAMA8, rope_scaling={"rope_type": "yarn"}))),
    "config-missing-field": lambda: plan_codes(cr(target=edited(LLAMA8, num_key_value_heads=0))),
    "config-value-invalid": lambda: plan_codes(cr(target=edited(LLAMA8, num_attention_heads=-1))),
    "draft-config-missing": lambda: evaluate_codes(cr(method="eagle3", with_draft=config("specforge__llama3-8B-eagle3"))["spec"], config(LLAMA8)),
    "method-unsupported": lambda: plan_codes(cr(method="medusa", with_draft="medusa-llama3-8b", **V33)),
    "method-needs-preflight": lambda: plan_codes(cr(method="my_plugin_method", **V34)),
    "target-architecture-unsupported": lambda: plan_codes(cr(target=edited(LLAMA8, architectures=["NoSuchForCausalLM"]))),
    "mtp-target-without-mtp-layers": lambda: plan_codes(cr(method="mtp", k=1, **V34)),
    "mtp-unsupported-target": lambda: plan_codes(cr(target=edited(LLAMA8, num_nextn_predict_layers=1), method="mtp", k=1, **V32)),
    "mtp-no-layers": lambda: plan_codes(cr(target=edited("deepseek-ai__DeepSeek-V3", num_nextn_predict_layers=0), method="mtp", k=1, **V32)),
    "draft-architecture-unsupported": lambda: plan_codes(cr(method="eagle3", with_draft=edited("specforge__llama3-8B-eagle3", architectures=["NoSuchModel"]))),
    "dspark-not-a-dspark-draft": lambda: plan_codes(cr(target=QWEN8, method="dspark", with_draft=QWEN06)),
    "draft-not-mlp-speculator": lambda: plan_codes(cr(method="mlp_speculator", with_draft=LLAMA1, **V32)),
    "heterogeneous-vocab": lambda: plan_codes(cr(method="draft_model", with_draft=QWEN06,
                                                 **V32, draft={"speculativeConfig": {"use_heterogeneous_vocab": True}})),
    "vocab-mismatch": lambda: plan_codes(cr(method="draft_model", with_draft=QWEN06)),
    "max-model-len-too-long": lambda: plan_codes(cr(serving={"maxModelLen": 10_000_000})),
    "speculative-max-model-len": lambda: plan_codes(cr(method="draft_model", with_draft=LLAMA1,
                                                       draft={"speculativeConfig": {"max_model_len": 10_000_000}})),
    "method-checkpoint-mismatch": lambda: plan_codes(cr(target=QWEN8, method="eagle3", with_draft="specforge__qwen3-8b-dflash", **V34)),
    "target-config-key-missing": lambda: plan_codes(cr(method="extract_hidden_states", k=1, **V34)),
    "suffix-needs-arctic-inference": lambda: plan_codes(cr(method="suffix", **V32)),
    "k-default": lambda: plan_codes(cr(method="suffix", k=None, **V34)),
    "k-auto": lambda: plan_codes(cr(k="auto")),
    "k-required": lambda: plan_codes(cr(k=None)),
    "k-not-multiple-of-n-predict": lambda: plan_codes(cr(method="eagle3", with_draft=edited("specforge__llama3-8B-eagle3", n_predict=2), k=3)),
    "k-fixed-by-method": lambda: plan_codes(cr(target="llama3-8b-aux-hidden-states", method="extract_hidden_states", k=2, **V34)),
    "target-heads-tp": lambda: plan_codes(cr(parallelism={"tensorParallelSize": 3})),
    "target-kv-heads-tp": lambda: plan_codes(cr(target=edited(LLAMA8, num_attention_heads=24, num_key_value_heads=6, hidden_size=3072, head_dim=128),
                                                parallelism={"tensorParallelSize": 8, "pipelineParallelSize": 1})),
    "draft-heads-tp": lambda: plan_codes(cr(target=LLAMA70, method="draft_model", with_draft=edited(LLAMA1, num_attention_heads=20, num_key_value_heads=4, hidden_size=1280, head_dim=64),
                                            parallelism={"tensorParallelSize": 8}, draft={"tensorParallelSize": 8})),
    "draft-kv-heads-tp": lambda: plan_codes(cr(target=LLAMA70, method="draft_model", with_draft=edited(LLAMA1, num_attention_heads=24, num_key_value_heads=6, hidden_size=1536, head_dim=64),
                                               parallelism={"tensorParallelSize": 8}, draft={"tensorParallelSize": 8})),
    "draft-tp-choice": lambda: plan_codes(cr(target=LLAMA70, method="draft_model", with_draft=LLAMA1, parallelism={"tensorParallelSize": 4},
                                             draft={"tensorParallelSize": 2})),
    "pipeline-parallel-method": lambda: plan_codes(cr(target="deepseek-ai__DeepSeek-V3", method="mtp", k=1, parallelism={"pipelineParallelSize": 2})),
    "pipeline-parallel-architecture": lambda: plan_codes(cr(target=edited(QWEN8, architectures=["AliceAIForCausalLM"]), parallelism={"pipelineParallelSize": 2})),
    "pipeline-parallel-layers": lambda: plan_codes(cr(target=LLAMA1, parallelism={"pipelineParallelSize": 32})),
    "target-load-fails": lambda: plan_codes(cr(target="dense-width-12300", parallelism={"tensorParallelSize": 8})),
    "draft-load-fails": lambda: plan_codes(cr(target="moonshotai__Kimi-K3", method="dspark", with_draft="k3-dspark-released", k=7,
                                              parallelism={"tensorParallelSize": 12}, draft={"tensorParallelSize": 1})),
    "draft-tp-not-honoured": lambda: plan_codes(cr(target=LLAMA70, method="eagle3", with_draft=edited("specforge__llama3-8B-eagle3", hidden_size=8192),
                                                   parallelism={"tensorParallelSize": 4}, draft={"tensorParallelSize": 1})),
    "gpu-unknown": lambda: plan_codes(cr(resources={"gpu": {"product": "H900"}})),
    "memory-not-checked": lambda: plan_codes(cr()),
    "memory-does-not-fit": lambda: plan_codes(cr(target=LLAMA70, resources={"gpu": {"product": "L4"}}, parallelism={"tensorParallelSize": 1, "pipelineParallelSize": 1})),
    "layout-node-split": lambda: plan_codes(cr(target=LLAMA70, resources={"gpu": {"product": "H100-80GB", "perNode": 3}},
                                               parallelism={"tensorParallelSize": 8, "pipelineParallelSize": 1})),
    "no-layout": lambda: plan_codes(cr(target=QWEN8, parallelism={"pipelineParallelSize": 2**63})),
    "image-accelerator-mismatch": lambda: plan_codes(cr(image="rocm/vllm:v0.34.0", **H100)),
    "gpu-resource-misspelled": lambda: plan_codes(cr(resources={"gpu": {"product": "H100-80GB", "resourceName": "nvidia.con/gpu"}})),
    "gpu-resource-vendor-mismatch": lambda: plan_codes(cr(resources={"gpu": {"product": "H100-80GB", "resourceName": "amd.com/gpu"}})),
    "model-cache-too-small": lambda: plan_codes(cr(modelCache={"sizeLimit": "1Gi"})),
    "rollout-canary-multi-node": lambda: plan_codes(cr(target=LLAMA70, resources={"gpu": {"product": "L4", "perNode": 2}},
                                                       rollout={"strategy": "Canary"})),
    "preflight-refused": preflight_codes,
}


def test_every_catalogued_code_has_an_input_that_reaches_it() -> None:
    assert sorted(set(CATALOGUE) - set(REACH)) == [] and sorted(set(REACH) - set(CATALOGUE)) == []


def field_pattern(field: str) -> re.Pattern[str]:
    """A catalogue field ("spec.draft.config.<key> | spec.vllm.extraArgs[i]") as a regex."""
    def one(alternative: str) -> str:
        text = re.escape(alternative.strip()).replace(re.escape("[i]"), r"\[\d+\]")
        return re.sub(re.escape("<") + r"[^>]*" + re.escape(">"), ".+", text)
    return re.compile("|".join(f"(?:{one(a)})" for a in field.split("|")))


@pytest.mark.parametrize("code", sorted(REACH))
def test_each_code_is_reached_through_the_pipeline_at_its_catalogued_field(code: str) -> None:
    reached = REACH[code]()
    assert code in reached, sorted(reached)
    pattern = field_pattern(CATALOGUE[code].field)
    assert [f for f in reached[code] if not pattern.fullmatch(f)] == [], f"{code}: catalogued at {CATALOGUE[code].field}"
