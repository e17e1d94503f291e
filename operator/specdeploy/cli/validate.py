"""`specdeploy validate`: a target/draft pair from flags, judged and planned."""

from __future__ import annotations

import argparse
from typing import Any

from specdeploy.api.spec import METHODS, check_int_or_auto, draft_model_rule
from specdeploy.cli.common import (EXIT_INVALID, EXIT_USAGE, EXIT_VALID, OFFLINE_HINT, OUTPUTS, UsageError, emit, findings_text,
                                   hf_token, hub_local_only, looks_local, plan_text)


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


def add_validate(sub: Any) -> None:
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

    local_only = not looks_local(ref) and hub_local_only()
    try:
        return load_model_ref(ref, revision=revision, token=hf_token(), field=flag, local_only=local_only)
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
        lines = [verdict, *findings_text(report["findings"]), *judged, *plan_text(report["plan"])]
        return "\n".join(lines) + "\n"

    emit(args.output, report, text)
    return EXIT_USAGE if unjudged else EXIT_VALID if evaluation.ok else EXIT_INVALID
