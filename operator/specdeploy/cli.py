"""specdeploy: check a vLLM speculative-decoding pair before any GPU is taken, plan its
layout, judge a running server's acceptance, and run the Kubernetes operator that serves it.

Exit status (scripts rely on it): 0 valid, 1 invalid (the findings say why), 2 usage or I/O
error (a bad flag, an unreadable file, a config that could not be read) or a spec that could not
be judged here (a method only a preflight of the image can judge: `specdeploy preflight`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from specdeploy.api.spec import METHODS, check_int_or_auto, draft_model_rule
from specdeploy.controller import LOG_FORMATS
from specdeploy.vllm.methods import methods_where

EXIT_VALID, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
OUTPUTS = ("text", "json", "yaml")
OFFLINE_HINT = ("give a local config.json (or a directory holding one) instead, put the config in a ConfigMap "
                "or inline it (plan -f), or pre-fill the Hugging Face cache and set HF_HUB_OFFLINE=1")


class UsageError(Exception):
    """Exit 2: the command could not judge anything; `field` names the flag or file at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field, self.message = field, message


# ---- output -----------------------------------------------------------------------------------

def _dump_json(data: Any) -> str:
    # allow_nan=False: never print NaN, which is not JSON (the stream loader refuses it earlier).
    return json.dumps(data, indent=2, allow_nan=False)


def _dump_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, width=120)


def _emit(output: str, data: dict[str, Any], text: Callable[[], str]) -> None:
    if output == "json":
        print(_dump_json(data))
    elif output == "yaml":
        print(_dump_yaml(data), end="")
    else:
        print(text(), end="")


def _findings_text(findings: list[dict[str, str]], indent: str = "  ") -> list[str]:
    return [f"{indent}[{f['severity']}] {f['code']} {f['field']}: {f['message']}" for f in findings]


def _plan_text(plan: dict[str, Any] | None, indent: str = "") -> list[str]:
    if not plan:
        return []
    draft = f", draft TP {plan['draftTensorParallelSize']}" if plan.get("draftTensorParallelSize") else ""
    lines = [f"{indent}plan: {plan['method']} k={plan['numSpeculativeTokens']}, TP {plan['tensorParallelSize']}{draft}, "
             f"PP {plan['pipelineParallelSize']}, {plan['nodesPerReplica']} node(s) x {plan['gpusPerPod']} GPU(s)"]
    for model in ("target", "draft"):
        layout = plan.get(model)
        if layout:
            lines.append(f"{indent}  {model}: {layout['attentionHeadsPerGpu']} heads/GPU, {layout['kvHeadsPerGpu']} KV heads/GPU, "
                         f"head size {layout['headSize']}, MLA {layout['usesMLA']}, experts {layout['numExperts']}")
    memory = plan.get("memory")
    if memory:
        lines.append(f"{indent}  memory/GPU: weights {memory['targetWeightsGiB'] + memory['draftWeightsGiB']:.1f} GiB + KV {memory['kvCacheGiB']:.1f} GiB"
                     f" + reserve {memory['activationReserveGiB']:.1f} GiB = {memory['requiredGiB']:.1f} of {memory['budgetGiB']:.1f} GiB")
    return lines


# ---- Hub access --------------------------------------------------------------------------------

def _hf_token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


_HUB_LOCAL_ONLY: bool | None = None


def _hub_local_only() -> bool:
    """Asked once per process: offline (HF_HUB_OFFLINE, or no route to the Hub) reads the cache only."""
    global _HUB_LOCAL_ONLY
    if _HUB_LOCAL_ONLY is None:
        from specdeploy.sources.hub import hub_reachable

        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        _HUB_LOCAL_ONLY = offline or not hub_reachable()
    return _HUB_LOCAL_ONLY


def _looks_local(ref: str) -> bool:
    from specdeploy.sources.resolve import path_exists

    return path_exists(Path(ref)) or ref.endswith(".json") or ref.startswith((".", "/", "~"))


# ---- validate ----------------------------------------------------------------------------------

def _int_or_auto(value: str) -> int | str:
    try:
        return check_int_or_auto(value if value == "auto" else int(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or 'auto', got {value!r}") from None


def _vllm_release(value: str) -> str:
    """--vllm-version: a release number, as the image's tag would give it."""
    from specdeploy.vllm import SUPPORTED_VERSIONS

    parts = value.split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"expected a vLLM release as X.Y.Z, e.g. {SUPPORTED_VERSIONS[-1]}, got {value!r}")
    return value


def _gpu_product(value: str) -> str:
    from specdeploy.planning.gpus import UnknownGpuError, lookup_gpu

    try:
        lookup_gpu(value)
    except UnknownGpuError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _add_validate(sub: Any) -> None:
    parser = sub.add_parser(
        "validate", help="check a target/draft pair and plan its layout",
        description="Check a target/draft pair the way vLLM will (head counts against tensor parallelism, "
                    "vocabularies, the method's draft format, k) and plan TP, PP and memory. Configs come from a "
                    "config.json, a directory holding one, or a Hub repo id (the cache only, when offline).")
    parser.add_argument("--target", required=True, help="config.json, a directory holding one, or a Hub repo id")
    parser.add_argument("--draft", help="the draft's config.json, directory or Hub repo id (not for ngram/suffix; optional for mtp/dspark)")
    parser.add_argument("--method", required=True, metavar="METHOD",
                        help=f"speculative method: {', '.join(METHODS)}; with a vLLM that lets plugins register methods, also one a plugin in the image registers")
    parser.add_argument("--tp", type=_int_or_auto, default="auto", help="target tensor parallel size (default auto)")
    parser.add_argument("--draft-tp", type=_int_or_auto, default="auto", help="draft tensor parallel size: 1, equal to --tp, or auto")
    parser.add_argument("--pp", type=_int_or_auto, default=1, help="pipeline parallel size (default 1)")
    parser.add_argument("--num-speculative-tokens", type=int, help="k, tokens proposed per step")
    parser.add_argument("--gpu", type=_gpu_product, help="GPU product for the memory fit, e.g. H100-80GB (an unknown name lists the catalog)")
    parser.add_argument("--max-model-len", type=int, help="context length the KV cache must hold")
    parser.add_argument("--revision", help="Hub revision of the target")
    from specdeploy.vllm import DEFAULT_IMAGE, DEFAULT_VERSION, SUPPORTED_VERSIONS

    release = parser.add_mutually_exclusive_group()
    release.add_argument("--vllm-version", type=_vllm_release, help=f"the vLLM release whose rules judge (supported: {', '.join(SUPPORTED_VERSIONS)}; default {DEFAULT_VERSION})")
    release.add_argument("--image", help=f"the vLLM image the pod will run; its release tag picks the rules (e.g. {DEFAULT_IMAGE})")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="output format (default text)")
    parser.set_defaults(func=_validate, check=_check_draft_flag)


def _check_draft_flag(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--draft is required exactly when the method drafts with a checkpoint of its own."""
    rule = draft_model_rule(args.method)
    if rule == "none" and args.draft:
        parser.error(f"--method {args.method} uses no draft model: drop --draft")
    if rule == "required" and not args.draft:
        parser.error(f"--method {args.method} needs --draft (a config.json, a directory holding one, or a Hub repo id)")


def _load_flag(ref: str, flag: str, revision: str | None = None) -> Any:
    """A --target/--draft value -> ModelInputs; source errors name the flag, offline ones the way out."""
    from specdeploy.sources import SourceInvalid, SourceUnavailable, load_model_ref

    local_only = not _looks_local(ref) and _hub_local_only()
    try:
        return load_model_ref(ref, revision=revision, token=_hf_token(), field=flag, local_only=local_only)
    except SourceUnavailable as exc:
        if local_only:
            raise UsageError(flag, f"{ref}: the Hub is unreachable and its config.json is not in the local cache: {OFFLINE_HINT}") from None
        raise UsageError(flag, f"{exc.message}: {OFFLINE_HINT}") from None
    except SourceInvalid as exc:  # the CLI's token is $HF_TOKEN, the CR's is hfTokenSecretRef
        raise UsageError(flag, exc.message.replace("hfTokenSecretRef", "HF_TOKEN")) from None


# The spec fields `validate` fills from its flags.
_FLAG_OF_FIELD = {
    "spec.target.model": "--target", "spec.target.revision": "--revision", "spec.draft.model": "--draft",
    "spec.draft.method": "--method", "spec.draft.numSpeculativeTokens": "--num-speculative-tokens",
    "spec.draft.tensorParallelSize": "--draft-tp", "spec.parallelism.tensorParallelSize": "--tp",
    "spec.parallelism.pipelineParallelSize": "--pp", "spec.resources.gpu.product": "--gpu",
    "spec.serving.maxModelLen": "--max-model-len", "spec.vllmVersion": "--vllm-version", "spec.image": "--image",
}


def _validate(args: argparse.Namespace) -> int:
    from specdeploy.api.parse import parse_spec
    from specdeploy.findings import Severity
    from specdeploy.pipeline import evaluate
    from specdeploy.sources import resolve_pair

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
    if args.max_model_len is not None:
        document["serving"] = {"maxModelLen": args.max_model_len}
    if args.vllm_version:
        document["vllmVersion"] = args.vllm_version
    if args.image:
        document["image"] = args.image
    spec, findings = parse_spec(document)
    if spec is None:  # every spec field came from a flag: a value the spec refuses is a usage error
        first = next(f for f in findings if f.severity is Severity.ERROR)
        raise UsageError(_FLAG_OF_FIELD.get(first.field, first.field), first.message)
    flags = {"spec.target": "--target", "spec.draft": "--draft"}  # the spec's models are the flags' values
    target, draft = resolve_pair(spec, lambda source, where: _load_flag(source.model, flags[where], source.revision))
    evaluation = evaluate(spec, target, draft)
    report = evaluation.to_dict()

    unjudged = evaluation.ok and evaluation.needs_preflight
    if unjudged:  # not accepted: only the image's vLLM can judge the method
        report["ok"] = False

    def text() -> str:
        judged = [f"judged by vLLM {report['vllmVersion']}'s rules"] if report.get("vllmVersion") else []
        verdict = ("NOT JUDGED: only a preflight of the image can judge the method (specdeploy preflight -f CR.yaml --python PATH)"
                   if unjudged else "VALID" if report["ok"] else "INVALID")
        lines = [verdict, *_findings_text(report["findings"]), *judged, *_plan_text(report["plan"])]
        return "\n".join(lines) + "\n"

    _emit(args.output, report, text)
    return EXIT_USAGE if unjudged else EXIT_VALID if evaluation.ok else EXIT_INVALID


# ---- plan --------------------------------------------------------------------------------------

def _add_plan(sub: Any) -> None:
    parser = sub.add_parser(
        "plan", help="judge every SpeculativeDeployment in a YAML stream and print its manifests",
        description="Judge every SpeculativeDeployment in a YAML stream (a file, or '-' for stdin, e.g. "
                    "`kustomize build . | specdeploy plan -f -`) as the API server and then the operator would, "
                    "reading configMapRef configs from ConfigMaps in the same stream. Prints one report and, "
                    "for the valid ones, the manifests the operator would apply. Exit 1 if any is invalid.")
    _stream_arguments(parser)
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="yaml",
                        help="yaml (default): the report as comments, then the manifests (pipe to kubectl apply); json: both as one object; text: the report alone")
    parser.set_defaults(func=_plan)


def _stream_arguments(parser: argparse.ArgumentParser) -> None:
    """-f and -n, as `plan` and `preflight` read a YAML stream."""
    parser.add_argument("-f", "--filename", required=True,
                        help="YAML or JSON stream: a file, a directory (its .json, .yaml and .yml files, as kubectl reads it) or '-' for stdin")
    parser.add_argument("-n", "--namespace", default=None, help="namespace for every object (default: each object's, else 'default')")


MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")  # what `kubectl apply -f DIR` reads from a directory


def _read_stream(filename: str) -> tuple[str, str]:
    """The YAML stream `-f` names: stdin ('-'), a file, or, as kubectl does, every .json, .yaml
    and .yml file directly in a directory, in name order."""
    if filename == "-":
        return sys.stdin.read(), "<stdin>"
    path = Path(filename)
    try:
        if not path.is_dir():
            return path.read_text(), filename
        files = sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES and p.is_file())
        if not files:
            raise UsageError("--filename", f"{filename} holds no {', '.join(MANIFEST_SUFFIXES)} file")
        return "\n---\n".join(p.read_text() for p in files), filename
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError("--filename", f"cannot read {filename}: {exc}") from None


def _plan(args: argparse.Namespace) -> int:
    from specdeploy.stream import plan_stream

    text, source = _read_stream(args.filename)
    report = plan_stream(text, source, namespace=args.namespace, hf_token=_hf_token(), hub_local_only=_hub_local_only)
    data = report.to_dict()
    for result in report.results:
        for finding in result.unjudged:
            print(f"specdeploy: {result.namespace}/{result.name}: {finding.field}: {finding.message}", file=sys.stderr)
    if args.output == "yaml":
        print("\n".join(f"# {line}" for line in _dump_yaml({**data, "results": [
            {k: v for k, v in r.items() if k != "manifests"} for r in data["results"]]}).splitlines()))
        manifests = [m for r in data["results"] for m in r["manifests"]]
        if manifests:
            import yaml

            print(yaml.safe_dump_all(manifests, sort_keys=False), end="")
    else:
        def text() -> str:
            lines = []
            for r in data["results"]:
                lines.append(f"{r['namespace']}/{r['name']}: {r['verdict'].upper()}")
                lines += _findings_text(r["findings"])
                lines += _plan_text(r["plan"], "  ")
            lines += [f"skipped {s}" for s in data["skipped"]]
            lines.append(f"{'OK' if data['ok'] else 'NOT OK'}: {data['summary']}")
            return "\n".join(lines) + "\n"

        _emit(args.output, data, text)
    return report.exit_code


# ---- preflight ----------------------------------------------------------------------------------

def _add_preflight(sub: Any) -> None:
    parser = sub.add_parser(
        "preflight", help="run the preflight judge (the image's own vLLM on the exact pod args) locally, or print its Job",
        description="For every SpeculativeDeployment in a YAML stream the fast rules accept (or refuse only by rules "
                    "guessed for an image of unknown release): run the operator's "
                    "in-image judge, with the exact vLLM args and configs its preflight Job would get, under PYTHON "
                    "(a Python with the image's vLLM), or (--render) print the Job and ConfigMap the operator would "
                    "create. Exit 0 if vLLM accepts all, 1 if it refused any, 2 if one could not be judged.")
    _stream_arguments(parser)
    parser.add_argument("--python", help="the Python to judge with (its vLLM stands for the image's)")
    parser.add_argument("--render", action="store_true", help="print the preflight Job and ConfigMap instead of running the judge")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="text (default), json, or yaml (--render's manifests)")
    parser.set_defaults(func=_preflight, check=_check_preflight_flags)


def _check_preflight_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.render == bool(args.python):
        parser.error("give exactly one of --python PATH (run the judge) and --render (print the Job)")


def _preflight(args: argparse.Namespace) -> int:
    from specdeploy.stream import plan_stream

    text, source = _read_stream(args.filename)
    report = plan_stream(text, source, namespace=args.namespace, hf_token=_hf_token(), hub_local_only=_hub_local_only)
    if args.render:
        return _preflight_render(report.results, args.output)
    results = [_preflight_one(result, args.python) for result in report.results]
    refused = any(r["ok"] is False and r["stage"] for r in results)
    unjudged = any(r["ok"] is None for r in results)
    code = EXIT_INVALID if refused else EXIT_USAGE if unjudged else EXIT_VALID
    for r in results:
        r["ok"] = bool(r["ok"])

    def text_report() -> str:
        lines = []
        for r in results:
            where = f"{r['namespace']}/{r['name']}"
            if r["ok"]:
                lines.append(f"{where}: ACCEPTED by vLLM {r['vllmVersion']}")
            elif r["stage"]:
                lines.append(f"{where}: REFUSED by vLLM {r['vllmVersion']} at the {r['stage']} stage: {r['error']}")
            else:
                lines.append(f"{where}: NOT JUDGED: {r['error']}")
            if r["guess"]:  # the fast rules' refusal was a guess: the verdict above replaces it
                lines.append(f"  the rules guessed for the image refused it: {r['guess']}")
        return "\n".join(lines) + "\n"

    _emit(args.output, {"ok": code == EXIT_VALID, "results": results}, text_report)
    return code


def _preflight_request(result: Any) -> Any:
    from specdeploy.preflight.request import judge_request

    spec, plan, target, draft = result.judged
    return spec, judge_request(spec, plan, target.config, draft.config if draft else None)


def _preflight_one(result: Any, python: str) -> dict[str, Any]:
    """One CR's verdict: ok True/False (vLLM's), or None when it could not be judged."""
    from specdeploy.local_judge import run_judge

    out: dict[str, Any] = {"name": result.name, "namespace": result.namespace, "ok": None, "stage": None, "error": None, "vllmVersion": None,
                           "guess": "; ".join(f"{f.field}: {f.message}" for f in result.guess) or None}
    if result.judged is None:
        return {**out, "error": f"the fast rules give it no plan ({result.verdict}): `specdeploy plan -f` says why"}
    spec, request = _preflight_request(result)
    env = {v.name: v.value for v in spec.vllm.env if v.value is not None}
    try:
        run = run_judge(python, request, env=env, remote_code=spec.target.trust_remote_code or spec.draft.trust_remote_code)
    except OSError as exc:
        raise UsageError("--python", f"cannot run {python}: {exc}") from None
    verdict = run.verdict
    if not run.judged or verdict is None:
        error = (verdict.error if verdict else None) or run.stderr_tail.strip()[-500:] or f"exit {run.exit_code}"
        return {**out, "error": f"the judge could not run: {error}", "vllmVersion": verdict.vllm_version if verdict else None}
    return {**out, "ok": verdict.ok, "stage": verdict.stage, "error": verdict.error, "vllmVersion": verdict.vllm_version}


def _preflight_render(results: list[Any], output: str) -> int:
    """The ConfigMap and Job per judged CR (the operator adds its ownerReference to the CR)."""
    from specdeploy.preflight import JUDGE_FILE
    from specdeploy.preflight.job import preflight_config_map, preflight_job

    manifests = []
    for result in results:
        if result.judged is None:
            print(f"specdeploy: {result.namespace}/{result.name}: no preflight: the fast rules give it no plan ({result.verdict})", file=sys.stderr)
            continue
        spec, request = _preflight_request(result)
        config_map = preflight_config_map(request, JUDGE_FILE.read_text(), cr_name=result.name, namespace=result.namespace)
        manifests += [config_map, preflight_job(spec, request, config_map, cr_name=result.name, namespace=result.namespace)]
    if output == "json":
        print(_dump_json({"apiVersion": "v1", "kind": "List", "items": manifests}))
    else:
        import yaml

        class Literal(yaml.SafeDumper):
            """The judge and the configs as readable blocks, not one escaped line."""

        Literal.add_representer(str, lambda dumper, value: dumper.represent_scalar(
            "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))
        print(yaml.dump_all(manifests, Dumper=Literal, sort_keys=False, width=120), end="")
    return EXIT_VALID if len(manifests) == 2 * len(results) else EXIT_USAGE


# ---- crd, run ----------------------------------------------------------------------------------

def _add_crd(sub: Any) -> None:
    parser = sub.add_parser("crd", help="print the SpeculativeDeployment CustomResourceDefinition",
                            description="Print the CustomResourceDefinition generated from the spec models "
                                        "(what crds/ and the chart ship): `specdeploy crd | kubectl apply -f -`.")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="yaml", help="yaml (default; text is the same) or json")
    parser.set_defaults(func=_crd)


def _crd(args: argparse.Namespace) -> int:
    from specdeploy.api.crd import crd, crd_yaml

    print(_dump_json(crd()) if args.output == "json" else crd_yaml(), end="\n" if args.output == "json" else "")
    return EXIT_VALID


def _add_run(sub: Any) -> None:
    parser = sub.add_parser("run", help="run the operator (kopf) against the current cluster",
                            description="Run the operator: watch SpeculativeDeployments, judge and plan each, and apply "
                                        "its Deployment or LeaderWorkerSet, Service and PodDisruptionBudget. Uses the "
                                        "in-cluster service account, else $KUBECONFIG.")
    parser.add_argument("-n", "--namespace", action="append", default=[], help="namespace to watch (repeatable)")
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=None,
                        help="operator log lines, at INFO: text, or json (one object per line, with the object's "
                             "namespace and name). Default: $SPECDEPLOY_LOG_FORMAT (the chart's logFormat), else text")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="format of a start-up error (see --log-format for the logs)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from specdeploy.controller.main import run

    try:
        run(namespaces=args.namespace, all_namespaces=args.all_namespaces, liveness=args.liveness, log_format=args.log_format)
    except ValueError as exc:
        raise UsageError("", str(exc)) from None
    return EXIT_VALID


# ---- advise (issue 9: speculation telemetry) ---------------------------------------------------

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


def _add_advise(sub: Any) -> None:
    parser = sub.add_parser(
        "advise", help="acceptance, predicted speedup per k and the recommended k from a vLLM /metrics text",
        description="Read a vLLM server's /metrics (a saved text, stdin, or its URL) and report the draft's acceptance, "
                    "the predicted speedup for each k and the recommended k. Exit 1 when speculation is judged "
                    "ineffective (the operator's SpeculationEffective condition would be False).")
    parser.add_argument("--metrics", required=True, help="a saved /metrics text ('-' for stdin) or the URL of a vLLM server's /metrics")
    parser.add_argument("--method", choices=METHODS, help=f"the server's speculative method ({'/'.join(methods_where(False, drafting='parallel'))} draft all positions "
                             f"in one pass; {'/'.join(methods_where(False, drafting='lookup'))} cost nothing)")
    parser.add_argument("--draft-cost", type=_non_negative, help=f"cost of one draft pass relative to one target step (default: 0 for {'/'.join(methods_where(False, drafting='lookup'))}, else 0.1)")
    parser.add_argument("--num-speculative-tokens", type=_positive_int, help="the k the server runs (default: the positions in the metrics)")
    parser.add_argument("-f", "--filename", help="the server's SpeculativeDeployment: its plan's layout and GPU give the draft cost and "
                                                 "the best k per batch size, the crossover and the verdict at the running-requests load")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="output format (default text)")
    parser.set_defaults(func=_advise)


def _advise(args: argparse.Namespace) -> int:
    """The telemetry's analysis of one /metrics text (counted since the server started).
    Exit 1 when speculation is judged ineffective (SpeculationEffective would be False)."""
    import urllib.error
    import urllib.request

    from dataclasses import replace

    from specdeploy.telemetry import analyse, parse_counters
    from specdeploy.telemetry.load import SCHEDULE_KEY, schedule, verdict_at_load
    from specdeploy.telemetry.report import load_summary, summary

    source = args.metrics
    try:
        if source.startswith(("http://", "https://")):
            with urllib.request.urlopen(source, timeout=10) as response:
                text = response.read().decode("utf-8", errors="replace")
        else:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except urllib.error.URLError as exc:
        raise UsageError("--metrics", f"{source}: {exc.reason}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError("--metrics", f"cannot read {source}: {exc}") from None
    counters = parse_counters(text)
    plan = _advise_plan(args.filename) if args.filename else None
    if plan is not None and args.method is None:
        args.method = plan.get("method")
    cost, cost_source = _advise_draft_cost(args, plan)
    analysis = analyse(counters, method=args.method, cost=cost, cost_source=cost_source, k=args.num_speculative_tokens)
    load = _advise_load(analysis, plan, text) if plan is not None else None
    if load is not None:
        analysis = replace(analysis, verdict=verdict_at_load(analysis, load))
    verdict = analysis.verdict
    report = {"speculationEffective": {"status": verdict.status, "reason": verdict.reason, "message": verdict.message}, **summary(analysis),
              **(load_summary(load, analysis.k) if load is not None else {})}
    ranges = schedule(load, plan.get("vllmVersion")) if load is not None and plan is not None else None
    if ranges is not None:
        report["speculativeConfig"] = {SCHEDULE_KEY: [list(r) for r in ranges]}

    def text_report() -> str:
        lines = [f"SpeculationEffective={verdict.status} ({verdict.reason}): {verdict.message}"]
        if analysis.predictions:
            best = analysis.recommended
            lines += [f"draft cost {analysis.cost:.3f} of a target step: {analysis.cost_source}", "   k  tokens/step  speedup"]
            for p in analysis.predictions:
                marks = ("  <- in force" if p.k == analysis.k else "") + ("  <- recommended" if best and p.k == best.k else "")
                lines.append(f"  {p.k:2d}  {p.expected_tokens:11.3f}  {p.speedup:6.3f}x{' (extrapolated)' if p.extrapolated else ''}{marks}")
        return "\n".join(lines + (_advise_load_table(load) if load is not None else []) + _advise_schedule_text(ranges)) + "\n"

    _emit(args.output, report, text_report)
    return EXIT_INVALID if verdict.status == "False" else EXIT_VALID


def _advise_draft_cost(args: argparse.Namespace, plan: dict[str, Any] | None) -> tuple[float, str]:
    """--draft-cost, else the plan's draft/target weights (0 for lookups), else the default."""
    from specdeploy.telemetry.model import DEFAULT_DRAFT_COST, draft_cost
    from specdeploy.vllm.methods import drafting

    if args.draft_cost is not None:
        return args.draft_cost, "given (--draft-cost)"
    if drafting(args.method) == "lookup" or plan is not None:
        return draft_cost(args.method or "", plan)
    return DEFAULT_DRAFT_COST, "assumed (pass --draft-cost: draft weights per GPU / target weights per GPU)"


def _advise_plan(filename: str) -> dict[str, Any]:
    """The plan of the (first) SpeculativeDeployment in the file, as `specdeploy plan` makes it."""
    from specdeploy.stream import StreamError, plan_stream

    try:
        text = sys.stdin.read() if filename == "-" else Path(filename).read_text()
        report = plan_stream(text, filename, hf_token=_hf_token(), hub_local_only=_hub_local_only)
    except (OSError, UnicodeDecodeError, StreamError) as exc:
        raise UsageError("--filename", f"cannot plan {filename}: {exc}") from None
    result = report.results[0]
    if result.plan is None:
        why = "; ".join(f.message for f in result.findings + result.unjudged if f.severity == "error") or "no plan"
        raise UsageError("--filename", f"{result.namespace}/{result.name} does not plan: {why}")
    return result.plan


def _advise_load(analysis: Any, plan: dict[str, Any], text: str) -> Any:
    """The cost model at the running-requests reading(s) of the metrics text."""
    from specdeploy.telemetry.cost import CostModelError
    from specdeploy.telemetry.load import analyse_load
    from specdeploy.telemetry.metrics import parse_sample

    try:
        return analyse_load(analysis, plan, [r for r in parse_sample(text).running if r >= 1])
    except CostModelError as exc:
        raise UsageError("--filename", str(exc)) from None


def _advise_load_table(load: Any) -> list[str]:
    """Predicted speedup per batch size (rows) and k (columns), the pick marked with *."""
    ks = range(1, len(load.work.acceptance) + 1)
    lines = [f"cost model: {load.source}",
             "crossover: " + ("none: some k pays at every batch up to 2^20" if load.crossover is None
                              else f"batch {load.crossover} (no k pays from there on)"),
             "  batch  " + "".join(f"   k={k:<3d}" for k in ks) + "  best k"]
    for advice in load.by_batch:
        cells = "".join(f"  {load.work.speedup(advice.batch_size, k):5.2f}{'*' if k == advice.k else ' '}" for k in ks)
        lines.append(f"  {advice.batch_size:5d}  {cells}  {advice.k}{'  (off)' if advice.k == 0 else ''}")
    if load.observed is not None:
        lines.append(f"observed: {load.observed.samples} running-requests reading(s), typical batch {load.observed.typical:g}")
    return lines


def _advise_schedule_text(ranges: list[tuple[int, int, int]] | None) -> list[str]:
    """The opt-in: the table as the release's per-batch-size k, to paste into the CR."""
    if ranges is None:
        return []
    from specdeploy.telemetry.load import SCHEDULE_KEY

    return [f"opt-in (off by default): spec.draft.speculativeConfig.{SCHEDULE_KEY}: {json.dumps([list(r) for r in ranges])}",
            "  vLLM #49548 (open): with such a schedule an 8-way concurrent run fell from about 232 to 24-157 tok/s; measure before keeping it"]


# ---- entry point -------------------------------------------------------------------------------

# One function per subcommand adds its parser; a new subcommand is one more entry here.
SUBCOMMANDS: list[Callable[[Any], None]] = [_add_validate, _add_plan, _add_preflight, _add_advise, _add_crd, _add_run]


class _Version(argparse.Action):
    """--version, importing the vLLM facts only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from specdeploy import __version__
        from specdeploy.vllm import DEFAULT_VERSION, SUPPORTED_VERSIONS

        print(f"specdeploy {__version__} (vLLM rules of {', '.join(SUPPORTED_VERSIONS)}; default {DEFAULT_VERSION})")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdeploy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="print the version and the vLLM releases whose rules it knows")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


class _StdoutTillClosed:
    """stdout that, once its reader has gone (`specdeploy plan -f x | head`), sends the rest to
    /dev/null: the command ends quietly with its verdict's exit status, as under `set -o pipefail`
    a script must still see an invalid stream fail."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _closed(self) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()
            self._stream.flush()  # what was buffered now goes to /dev/null

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    check = getattr(args, "check", None)
    if check is not None:
        check(parser, args)
    stdout, sys.stdout = sys.stdout, _StdoutTillClosed(sys.stdout)
    try:
        status = args.func(args)
        sys.stdout.flush()
        return status
    except UsageError as exc:
        return _usage_failure(args, exc.field, exc.message)
    except (OSError, ValueError) as exc:
        return _usage_failure(args, "", str(exc))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not the user's input: say so in one line, never a traceback
        if os.environ.get("SPECDEPLOY_DEBUG"):
            raise
        return _usage_failure(args, "", f"internal error ({type(exc).__name__}: {exc}); SPECDEPLOY_DEBUG=1 shows the traceback, please report it")
    finally:
        sys.stdout = stdout


def _usage_failure(args: argparse.Namespace, field: str, message: str) -> int:
    """Exit 2, the message on stderr; with -o json/yaml also a machine-readable error on stdout."""
    print(f"specdeploy: {field + ': ' if field else ''}{message}", file=sys.stderr)
    output = getattr(args, "output", "text")
    if output in ("json", "yaml"):
        data = {"ok": False, "error": {"field": field, "message": message}}
        print(_dump_json(data) if output == "json" else _dump_yaml(data), end="\n" if output == "json" else "")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
