"""A generator of malformed SpeculativeDeployments for `specdeploy plan -f`, and an in-process
runner that classifies each run (exit status, traceback, seconds).

The shapes are the ones that broke the CLI and the operator: config values of the wrong type
or absurd size (`num_key_value_heads` 1e18+1, `num_hidden_layers` 1e7, a RoPE factor of 1e308,
`group_size: 0`, `architectures: 5`), deep nesting, wrong types where the spec wants an
object, and random deletions. Seeded: the same seed gives the same corpus.

    python -m tests.fuzz.hostile --count 5000 --seed 7     # prints a summary line
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import random
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from tests.conftest import not_in_our_words
from tests.fuzz.schemas import accepted_manifests, child_problems

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ("llama-3.1-8b-eagle3.yaml", "qwen3-8b-ngram.yaml", "qwen3-32b-draft-model.yaml", "kimi-k3-dspark-h200.yaml",
            "deepseek-v3-mtp.yaml", "llama-3.1-70b-eagle3.yaml")

HOSTILE_VALUES: list[Any] = [
    10**18 + 1, 10**7, 2**63, -1, 0, 1e308, -1e308, 1.5, "32", "", "x" * 5000, True, None, [], {}, [1, 2, 3],
    {"a": 1}, [[[]]], 3.0, 10**400, "1e18",
]
CONFIG_KEYS = [
    "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "hidden_size", "head_dim", "vocab_size",
    "intermediate_size", "max_position_embeddings", "architectures", "model_type", "torch_dtype", "kv_lora_rank",
    "qk_rope_head_dim", "q_lora_rank", "n_routed_experts", "num_experts_per_tok", "rope_scaling", "rope_theta",
    "text_config", "quantization_config", "draft_vocab_size", "block_size", "num_nextn_predict_layers",
    "tie_word_embeddings", "sliding_window", "rope_parameters", "moe_intermediate_size", "first_k_dense_replace",
]
SPEC_PATHS = [
    ("replicas",), ("image",), ("target",), ("target", "model"), ("target", "revision"), ("target", "config"),
    ("draft",), ("draft", "method"), ("draft", "numSpeculativeTokens"), ("draft", "tensorParallelSize"),
    ("resources",), ("resources", "gpu"), ("resources", "gpu", "product"), ("resources", "gpu", "perNode"),
    ("parallelism", "tensorParallelSize"), ("serving", "maxModelLen"), ("serving", "gpuMemoryUtilization"),
    ("vllm", "extraArgs"), ("vllm", "env"), ("scheduling", "tolerations"), ("scheduling", "nodeSelector"),
]


def _examples() -> list[dict[str, Any]]:
    docs = []
    for name in EXAMPLES:
        docs += [d for d in yaml.safe_load_all((ROOT / "examples" / name).read_text()) if isinstance(d, dict) and d.get("kind")]
    return docs


DEEP = "__deep__"


def _deep_text(depth: int) -> str:
    """Flow-style YAML nested `depth` levels (built as text: no serialiser recurses that far)."""
    opens = "".join("{k: " if i % 2 else "[" for i in range(depth))
    closes = "".join("}" if i % 2 else "]" for i in reversed(range(depth)))
    return opens + "1" + closes


def _configs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec") or {}
    out = []
    for part in ("target", "draft"):
        config = (spec.get(part) or {}).get("config")
        if isinstance(config, dict):
            out.append(config)
            text = config.get("text_config")
            if isinstance(text, dict):
                out.append(text)
    return out


def _set_path(root: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = root
    for key in path[:-1]:
        nxt = node.get(key)
        if not isinstance(nxt, dict):
            nxt = node[key] = {}
        node = nxt
    node[path[-1]] = value


def mutate(doc: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], str]:
    """One malformed copy of `doc` and a short description of what was done."""
    doc = copy.deepcopy(doc)
    spec = doc.setdefault("spec", {})
    configs = _configs(doc)
    shape = rng.choice(["config-value"] * 6 + ["config-named", "config-delete", "spec-value", "deep", "deep-yaml", "metadata", "spec-type"])
    if shape == "config-value" and configs:
        config, key, value = rng.choice(configs), rng.choice(CONFIG_KEYS), rng.choice(HOSTILE_VALUES)
        config[key] = value
        return doc, f"config {key}={str(value)[:30]}"
    if shape == "config-named" and configs:
        config = rng.choice(configs)
        named = rng.choice([
            ("rope_scaling", {"rope_type": "linear", "factor": 1e308}),
            ("rope_scaling", {"type": "dynamic", "factor": -3}),
            ("quantization_config", {"quant_method": "gptq", "bits": 4, "group_size": 0}),
            ("quantization_config", {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "group_size": 0}}}}),
            ("quantization_config", {"quant_method": "awq", "bits": "four"}),
            ("architectures", 5), ("architectures", [5]), ("num_key_value_heads", 10**18 + 1), ("num_hidden_layers", 10**7),
            ("linear_attn_config", {"full_attn_layers": 7, "num_heads": "x"}), ("text_config", [1]),
        ])
        config[named[0]] = named[1]
        return doc, f"config {named[0]}={str(named[1])[:40]}"
    if shape == "config-delete" and configs:
        config = rng.choice(configs)
        for key in rng.sample(sorted(config), k=min(len(config), rng.randint(1, 6))):
            del config[key]
        return doc, "config keys deleted"
    if shape in ("deep", "deep-yaml"):
        where = rng.choice(configs) if configs else spec
        depth = rng.choice([40, 120, 330]) if shape == "deep" else rng.choice([900, 3000])
        where["nested"] = f"{DEEP}{depth}"
        return doc, f"{shape} {depth}"
    if shape == "metadata":
        doc["metadata"] = rng.choice([[], "x", 5, {"name": 5}, {"name": "x" * 300}, {"namespace": []}, None])
        return doc, f"metadata {str(doc['metadata'])[:30]}"
    if shape == "spec-type":
        doc["spec"] = rng.choice([[], "x", 5, None, {"target": []}, {"target": {"config": []}}, {"draft": "eagle"}])
        return doc, f"spec={str(doc['spec'])[:30]}"
    path, value = rng.choice(SPEC_PATHS), rng.choice(HOSTILE_VALUES)
    _set_path(spec, path, value)
    return doc, f"spec {'.'.join(path)}={str(value)[:30]}"


def corpus(count: int, seed: int) -> Iterator[tuple[str, str]]:
    """(description, YAML text) pairs."""
    rng = random.Random(seed)
    bases = _examples()
    for _ in range(count):
        doc, what = mutate(rng.choice(bases), rng)
        text = yaml.safe_dump(doc, sort_keys=False, width=10**6)
        if DEEP in text:
            head, _, tail = text.partition(DEEP)
            digits = "".join(c for c in tail[:8] if c.isdigit())
            text = head + _deep_text(int(digits)) + tail[len(digits):]
        yield what, text


@dataclass
class Outcome:
    what: str
    code: int | None
    seconds: float
    traceback: str | None
    stderr: str
    stdout: str


def run_plan(text: str, path: Path, what: str = "") -> Outcome:
    """`specdeploy plan -f path -o json` in this process; `seconds` is the CPU time it took (a
    machine's load cannot make a run slow, only work can)."""
    from specdeploy.cli import main

    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    code: int | None
    tb = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["plan", "-f", str(path), "-o", "json"])
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # noqa: BLE001 - what we are counting
            code, tb = None, traceback.format_exc()
    return Outcome(what, code, time.process_time() - start, tb, err.getvalue(), out.getvalue())


def children_problems(outcome: Outcome) -> list[str]:
    """What the API server would refuse of the children of the documents this run accepted."""
    return child_problems(accepted_manifests(outcome.stdout, "json")) if outcome.code in (0, 1) else []


def names_what_is_wrong(outcome: Outcome) -> bool:
    """Exit 1: a finding with a field, every finding in our words; exit 2: a message on stderr."""
    if outcome.code == 2:
        return bool(outcome.stderr.strip())
    if outcome.code == 1:
        try:
            document = json.loads(outcome.stdout)
            # `plan -o json` reports a stream: one result per SpeculativeDeployment.
            results = document["results"] if "results" in document else [document]
            findings = [f for result in results for f in result["findings"]]
        except (ValueError, KeyError, TypeError):
            return False
        # ... in our words: no raw pydantic text, nothing longer than a finding may be.
        return any(f.get("severity") == "error" and f.get("field") for f in findings) and \
            not not_in_our_words([str(f.get("message")) for f in findings])
    return outcome.code == 0


def main() -> int:
    import tempfile

    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    tracebacks, slow, unnamed, codes = [], [], [], {}
    bad_children: list[tuple[Outcome, str]] = []
    by_shape: dict[str, dict[str, int]] = {}
    slowest = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sd.yaml"
        for what, text in corpus(args.count, args.seed):
            outcome = run_plan(text, path, what)
            codes[outcome.code] = codes.get(outcome.code, 0) + 1
            shape = by_shape.setdefault(what.split()[0], {"runs": 0, "tracebacks": 0})
            shape["runs"] += 1
            shape["tracebacks"] += bool(outcome.traceback)
            slowest = max(slowest, outcome.seconds)
            if outcome.traceback:
                tracebacks.append(outcome)
            elif not names_what_is_wrong(outcome):
                unnamed.append(outcome)
            elif children_problems(outcome):
                bad_children.append((outcome, children_problems(outcome)[0]))
            if outcome.seconds > 10:
                slow.append(outcome)
    print(json.dumps({"count": args.count, "seed": args.seed, "exit_codes": {str(k): v for k, v in codes.items()},
                      "tracebacks": len(tracebacks), "over_10s": len(slow), "unnamed": len(unnamed),
                      "accepted_with_bad_children": len(bad_children),
                      "slowest_s": round(slowest, 2), "by_shape": by_shape}))
    for o in tracebacks[:10]:
        print("TRACEBACK", o.what, o.traceback.strip().splitlines()[-1] if o.traceback else "")
    for o in unnamed[:10]:
        print("UNNAMED", o.what, o.code, o.stderr[:200])
    for o in slow[:10]:
        print("SLOW", f"{o.seconds:.1f} s", o.what)
    for o, why in bad_children[:10]:
        print("BAD CHILD", o.what, why)
    return 1 if tracebacks or slow or bad_children else 0


if __name__ == "__main__":
    raise SystemExit(main())
