"""`specdeploy`: validate a pair, plan a SpeculativeDeployment, judge a server's acceptance,
print the CRD, run the operator.

Exit status (scripts rely on it): 0 valid, 1 invalid (findings say why), 2 usage or I/O error."""

from __future__ import annotations

import argparse
import json
import urllib.error
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from specdeploy.api.spec import METHODS, check_int_or_auto, draft_model_rule
from specdeploy.vllm import DEFAULT_VERSION, SUPPORTED_VERSIONS

EXIT_VALID, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def _int_or_auto(value: str) -> int | str:
    try:
        return check_int_or_auto(value if value == "auto" else int(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or 'auto', got {value!r}") from None


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}")
    return number


def _non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {number}")
    return number


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdeploy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check a target/draft pair and plan its layout")
    validate.add_argument("--target", required=True, help="config.json, a directory holding one, or a Hub repo id")
    validate.add_argument("--draft", help="the draft's config.json, directory or Hub repo id (not for ngram/suffix/mtp)")
    validate.add_argument("--method", required=True, choices=METHODS, help="speculative method")
    validate.add_argument("--tp", type=_int_or_auto, default="auto", help="target tensor parallel size (default auto)")
    validate.add_argument("--draft-tp", type=_int_or_auto, default="auto", help="draft tensor parallel size: 1, equal to --tp, or auto")
    validate.add_argument("--pp", type=_int_or_auto, default=1, help="pipeline parallel size (default 1)")
    validate.add_argument("--num-speculative-tokens", type=int, help="k, tokens proposed per step")
    validate.add_argument("--gpu", help="GPU product for the memory fit, e.g. H100-80GB")
    validate.add_argument("--max-model-len", type=int, help="context length the KV cache must hold")
    validate.add_argument("--revision", help="Hub revision of the target")
    release = validate.add_mutually_exclusive_group()
    release.add_argument("--vllm-version", help=f"the vLLM release whose rules judge (supported: {', '.join(SUPPORTED_VERSIONS)}; default {DEFAULT_VERSION})")
    release.add_argument("--image", help="the vLLM image the pod will run; its release tag picks the rules (e.g. vllm/vllm-openai:v0.33.0)")
    validate.add_argument("-o", "--output", choices=("json", "text"), default="text")

    plan = sub.add_parser("plan", help="validate + plan a SpeculativeDeployment file and print the manifests")
    plan.add_argument("-f", "--filename", required=True, help="SpeculativeDeployment YAML ('-' for stdin)")
    plan.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    plan.add_argument("-n", "--namespace", default=None, help="namespace for the manifests (default: the object's, else 'default')")

    advise = sub.add_parser("advise", help="acceptance, predicted speedup per k and the recommended k from a vLLM /metrics text")
    advise.add_argument("--metrics", required=True, help="a saved /metrics text ('-' for stdin) or the URL of a vLLM server's /metrics")
    advise.add_argument("--method", choices=METHODS, help="the server's speculative method (dflash/dspark draft all positions in one pass; ngram/suffix cost nothing)")
    advise.add_argument("--draft-cost", type=_non_negative, help="cost of one draft pass relative to one target step (default: 0 for ngram/suffix, else 0.1)")
    advise.add_argument("--num-speculative-tokens", type=_positive_int, help="the k the server runs (default: the positions in the metrics)")
    advise.add_argument("-o", "--output", choices=("json", "text"), default="text")

    sub.add_parser("crd", help="print the CustomResourceDefinition YAML")

    run = sub.add_parser("run", help="run the operator (kopf)")
    run.add_argument("-n", "--namespace", action="append", default=[], help="namespace to watch (repeatable)")
    run.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    run.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    return parser


def _hf_token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


def _print_text(evaluation: Any) -> None:
    print("VALID" if evaluation.ok else "INVALID")
    for finding in evaluation.findings:
        print(f"  [{finding.severity.value}] {finding.code} {finding.field}: {finding.message}")
    plan = evaluation.plan
    if evaluation.vllm_version:
        print(f"judged by vLLM {evaluation.vllm_version}'s rules")
    if plan is not None:
        draft = f", draft TP {plan.draft_tensor_parallel_size}" if plan.draft_tensor_parallel_size else ""
        print(f"plan: {plan.method} k={plan.num_speculative_tokens}, TP {plan.tensor_parallel_size}{draft}, PP {plan.pipeline_parallel_size}, {plan.nodes_per_replica} node(s) x {plan.gpus_per_pod} GPU(s)")
        for model, layout in (("target", plan.target), ("draft", plan.draft)):
            if layout is not None:
                print(f"  {model}: {layout.attention_heads_per_gpu} heads/GPU, {layout.kv_heads_per_gpu} KV heads/GPU, head size {layout.head_size}, MLA {layout.uses_mla}, experts {layout.num_experts}")
        if plan.memory is not None:
            m = plan.memory
            print(f"  memory/GPU: weights {m.target_weights_gib + m.draft_weights_gib:.1f} GiB + KV {m.kv_cache_gib:.1f} GiB + reserve {m.activation_reserve_gib:.1f} GiB = {m.required_gib:.1f} of {m.budget_gib:.1f} GiB")


def _check_draft_flag(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--draft is required exactly when the method drafts with a checkpoint of its own."""
    rule = draft_model_rule(args.method)
    if rule == "none" and args.draft:
        parser.error(f"--method {args.method} uses no draft model: drop --draft")
    if rule == "required" and not args.draft:
        parser.error(f"--method {args.method} needs --draft (a config.json, a directory holding one, or a Hub repo id)")


def _validate(args: argparse.Namespace) -> int:
    from specdeploy.api.parse import parse_spec
    from specdeploy.pipeline import Evaluation, evaluate
    from specdeploy.sources import load_model_ref

    draft_spec: dict[str, Any] = {"method": args.method, "tensorParallelSize": args.draft_tp}
    if args.draft:
        draft_spec["model"] = args.draft
    if args.num_speculative_tokens is not None:
        draft_spec["numSpeculativeTokens"] = args.num_speculative_tokens
    document: dict[str, Any] = {
        "target": {"model": args.target, **({"revision": args.revision} if args.revision else {})},
        "draft": draft_spec,
        "parallelism": {"tensorParallelSize": args.tp, "pipelineParallelSize": args.pp},
    }
    if args.gpu:
        document["resources"] = {"gpu": {"product": args.gpu}}
    if args.max_model_len:
        document["serving"] = {"maxModelLen": args.max_model_len}
    if args.vllm_version:
        document["vllmVersion"] = args.vllm_version
    if args.image:
        document["image"] = args.image
    spec, findings = parse_spec(document)
    if spec is None:
        evaluation = Evaluation(tuple(findings), None)
    else:
        target = load_model_ref(args.target, revision=args.revision, token=_hf_token(), field="spec.target.model")
        draft = load_model_ref(args.draft, token=_hf_token(), field="spec.draft.model") if spec.draft.has_own_checkpoint else None
        evaluation = evaluate(spec, target, draft)
    if args.output == "json":
        print(json.dumps(evaluation.to_dict(), indent=2))
    else:
        _print_text(evaluation)
    return EXIT_VALID if evaluation.ok else EXIT_INVALID


def _read_stream(text: str, filename: str) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """The SpeculativeDeployment (or bare spec) of a YAML stream, and the ConfigMaps beside it
    (as `kustomize build` or `kubectl create configmap --dry-run=client -o yaml` emit them)."""
    from specdeploy.api.spec import KIND

    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    if not all(isinstance(d, dict) for d in documents):
        raise ValueError(f"{filename} must hold YAML mappings")
    configmaps = {(d.get("metadata") or {}).get("name", ""): dict(d.get("data") or {}) for d in documents if d.get("kind") == "ConfigMap"}
    deployments = [d for d in documents if d.get("kind") == KIND] or [d for d in documents if not d.get("kind")]
    if len(deployments) != 1:
        raise ValueError(f"{filename} must hold exactly one {KIND} (found {len(deployments)})")
    return deployments[0], configmaps


def _plan(args: argparse.Namespace) -> int:
    from specdeploy.api.parse import parse_spec, spec_of_document
    from specdeploy.pipeline import Evaluation, evaluate
    from specdeploy.render import render_manifests
    from specdeploy.sources import SourceInvalid, resolve_model

    text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
    document, configmaps = _read_stream(text, args.filename)

    def configmap_reader(name: str, key: str) -> str:
        if key not in configmaps.get(name, {}):
            raise SourceInvalid("configMapRef", f"ConfigMap {name} with key {key} is not in {args.filename}: add it to the stream or inline the config")
        return configmaps[name][key]

    metadata = document.get("metadata") or {}
    name = metadata.get("name", "specdeploy")
    namespace = args.namespace or metadata.get("namespace") or "default"
    spec, findings = parse_spec(spec_of_document(document))
    manifests: list[dict[str, Any]] = []
    if spec is None:
        evaluation = Evaluation(tuple(findings), None)
    else:
        target = resolve_model(spec.target, "spec.target", hf_token=_hf_token(), configmap_reader=configmap_reader)
        draft = resolve_model(spec.draft, "spec.draft", hf_token=_hf_token(), configmap_reader=configmap_reader) if spec.draft.has_own_checkpoint else None
        evaluation = evaluate(spec, target, draft)
        if evaluation.ok and evaluation.plan is not None:
            manifests = render_manifests(spec, evaluation.plan, name=name, namespace=namespace)
    if args.output == "json":
        print(json.dumps({**evaluation.to_dict(), "manifests": manifests}, indent=2))
    else:
        summary = yaml.safe_dump({"ok": evaluation.ok, "findings": [f.to_dict() for f in evaluation.findings],
                                  "plan": evaluation.plan.to_dict() if evaluation.plan else None}, sort_keys=False)
        print("\n".join(f"# {line}" for line in summary.splitlines()))
        if manifests:
            print(yaml.safe_dump_all(manifests, sort_keys=False), end="")
    return EXIT_VALID if evaluation.ok else EXIT_INVALID


def _advise(args: argparse.Namespace) -> int:
    """The telemetry's analysis of one /metrics text (counted since the server started).
    Exit 1 when speculation is judged ineffective (SpeculationEffective would be False)."""
    import urllib.request

    from specdeploy.telemetry import analyse, parse_counters
    from specdeploy.telemetry.model import DEFAULT_DRAFT_COST, LOOKUP_DRAFTERS
    from specdeploy.telemetry.report import summary

    source = args.metrics
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=10) as response:
            text = response.read().decode("utf-8", errors="replace")
    else:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    counters = parse_counters(text)
    if args.draft_cost is not None:
        cost, cost_source = args.draft_cost, "given (--draft-cost)"
    elif args.method in LOOKUP_DRAFTERS:
        cost, cost_source = 0.0, f"{args.method} drafts by lookup, no model pass"
    else:
        cost, cost_source = DEFAULT_DRAFT_COST, "assumed (pass --draft-cost: draft weights per GPU / target weights per GPU)"
    analysis = analyse(counters, method=args.method, cost=cost, cost_source=cost_source, k=args.num_speculative_tokens)
    verdict = analysis.verdict
    if args.output == "json":
        print(json.dumps({"speculationEffective": {"status": verdict.status, "reason": verdict.reason, "message": verdict.message},
                          **summary(analysis)}, indent=2))
    else:
        print(f"SpeculationEffective={verdict.status} ({verdict.reason}): {verdict.message}")
        if analysis.predictions:
            best = analysis.recommended
            print(f"draft cost {analysis.cost:.3f} of a target step: {analysis.cost_source}")
            print("   k  tokens/step  speedup")
            for p in analysis.predictions:
                marks = ("  <- in force" if p.k == analysis.k else "") + ("  <- recommended" if best and p.k == best.k else "")
                print(f"  {p.k:2d}  {p.expected_tokens:11.3f}  {p.speedup:6.3f}x{' (extrapolated)' if p.extrapolated else ''}{marks}")
    return EXIT_INVALID if verdict.status == "False" else EXIT_VALID


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "validate":
        _check_draft_flag(parser, args)
    from specdeploy.sources import SourceInvalid, SourceUnavailable

    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "plan":
            return _plan(args)
        if args.command == "advise":
            return _advise(args)
        if args.command == "crd":
            from specdeploy.api.crd import crd_yaml

            print(crd_yaml(), end="")
            return EXIT_VALID
        from specdeploy.controller.main import run

        run(namespaces=args.namespace, all_namespaces=args.all_namespaces, liveness=args.liveness)
        return EXIT_VALID
    except (SourceInvalid, SourceUnavailable) as exc:
        print(f"specdeploy: {exc.field}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except urllib.error.URLError as exc:
        print(f"specdeploy: {getattr(args, 'metrics', '')}: {exc.reason}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"specdeploy: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
