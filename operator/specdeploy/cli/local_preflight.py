"""`specdeploy preflight`: the in-image judge (specdeploy/preflight/) run under a local Python, or
the Job the operator's preflight gate (controller/reconcile/preflight_gate.py) would create, printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from specdeploy.cli.common import (EXIT_INVALID, EXIT_USAGE, EXIT_VALID, OUTPUTS, UsageError, dump_json, emit, hf_token,
                                   hub_local_only, read_stream, stream_arguments)


def add_preflight(sub: Any) -> None:
    parser = sub.add_parser(
        "preflight", help="run the preflight judge (the image's own vLLM on the exact pod args) locally, or print its Job",
        description="For every SpeculativeDeployment in a YAML stream the fast rules accept (or refuse only by rules "
                    "guessed for an image of unknown release): run the operator's "
                    "in-image judge, with the exact vLLM args and configs its preflight Job would get, under PYTHON "
                    "(a Python with the image's vLLM), or (--render) print the Job and ConfigMap the operator would "
                    "create. Exit 0 if vLLM accepts all, 1 if it refused any, 2 if one could not be judged.")
    stream_arguments(parser)
    parser.add_argument("--python", help="the Python to judge with (its vLLM stands for the image's)")
    parser.add_argument("--render", action="store_true", help="print the preflight Job and ConfigMap instead of running the judge")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text", help="text (default), json, or yaml (--render's manifests)")
    parser.set_defaults(func=_preflight, check=_check_preflight_flags)


def _check_preflight_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.render == bool(args.python):
        parser.error("give exactly one of --python PATH (run the judge) and --render (print the Job)")


def _preflight(args: argparse.Namespace) -> int:
    from specdeploy.stream import plan_stream

    text, source = read_stream(args.filename)
    report = plan_stream(text, source, namespace=args.namespace, hf_token=hf_token(), hub_local_only=hub_local_only)
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

    emit(args.output, {"ok": code == EXIT_VALID, "results": results}, text_report)
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
        print(dump_json({"apiVersion": "v1", "kind": "List", "items": manifests}))
    else:
        import yaml

        class Literal(yaml.SafeDumper):
            """The judge and the configs as readable blocks, not one escaped line."""

        Literal.add_representer(str, lambda dumper, value: dumper.represent_scalar(
            "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))
        print(yaml.dump_all(manifests, Dumper=Literal, sort_keys=False, width=120), end="")
    return EXIT_VALID if len(manifests) == 2 * len(results) else EXIT_USAGE
