"""A YAML stream of objects (what `kustomize build` prints) -> one report on every
SpeculativeDeployment in it: judged as the API server would (api.parse), then as the operator
would (pipeline.evaluate), with configMapRef configs read from the ConfigMaps beside them.

The only I/O is reading Hub configs (sources/); everything else is the same pure code the
operator runs. `specdeploy plan -f` prints what this returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from specdeploy.api.parse import ParsedObject, parse_object
from specdeploy.api.spec import API_GROUP, KIND
from specdeploy.api.yaml_stream import StreamError, load_documents
from specdeploy.findings import Finding, Severity, Stage, error, has_errors
from specdeploy.validation.rules import METHOD_NEEDS_PREFLIGHT

EXIT_VALID, EXIT_INVALID, EXIT_UNJUDGED = 0, 1, 2


@dataclass(frozen=True)
class ObjectResult:
    name: str
    namespace: str
    findings: tuple[Finding, ...]
    plan: dict[str, Any] | None
    manifests: list[dict[str, Any]]
    # Findings that mean "could not be judged" (a config that could not be read), not "invalid".
    unjudged: tuple[Finding, ...] = ()
    vllm_version: str | None = None  # the vLLM release whose rules judged it
    # What the preflight needs (`specdeploy preflight`): the spec, the plan and both configs.
    judged: tuple[Any, ...] | None = field(default=None, compare=False, repr=False)
    # The errors of rules guessed for an image of unknown release, when the preflight judges the
    # image's own plan instead (pipeline.plan_for_image): its verdict, not theirs, decides.
    guess: tuple[Finding, ...] = ()

    @property
    def verdict(self) -> str:
        if has_errors(list(self.findings)):
            return "invalid"
        return "unjudged" if self.unjudged else "valid"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "namespace": self.namespace, "verdict": self.verdict, "ok": self.verdict == "valid", "vllmVersion": self.vllm_version,
                "findings": [f.to_dict() for f in self.findings + self.unjudged], "plan": self.plan, "manifests": self.manifests}


@dataclass
class StreamReport:
    results: list[ObjectResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        verdicts = {r.verdict for r in self.results}
        if "invalid" in verdicts:
            return EXIT_INVALID
        return EXIT_UNJUDGED if "unjudged" in verdicts else EXIT_VALID

    def to_dict(self) -> dict[str, Any]:
        counts = {v: sum(r.verdict == v for r in self.results) for v in ("valid", "invalid", "unjudged")}
        summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "nothing judged"
        return {"ok": self.exit_code == EXIT_VALID, "summary": f"{len(self.results)} {KIND}(s), {summary}",
                "results": [r.to_dict() for r in self.results], "skipped": self.skipped}


def _is_ours(document: Any) -> bool:
    """Judged here: our kind, anything in our API group (a wrong version is a finding), a bare spec."""
    if not isinstance(document, dict):
        return True
    api_version = document.get("apiVersion")
    return (document.get("kind") == KIND or (isinstance(api_version, str) and api_version.split("/")[0] == API_GROUP)
            or not ({"apiVersion", "kind"} & set(document)))


def _list_items(documents: list[Any]) -> list[Any]:
    """`kubectl apply -f` applies the items of a List (`kind: List`, or any `...List` with
    `items`, as `kubectl get -o yaml` prints several objects): so are they judged here."""
    out: list[Any] = []
    for document in documents:
        kind = document.get("kind") if isinstance(document, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(document.get("items"), list):
            out += document["items"]
        else:
            out.append(document)
    return out


def _label(document: dict[str, Any]) -> str:
    metadata = document.get("metadata") if isinstance(document.get("metadata"), dict) else {}
    return f"{document.get('kind')}/{metadata.get('name')}"


def _configmaps(documents: list[Any], default_namespace: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(namespace, name) -> data, for the ConfigMaps of the stream."""
    maps: dict[tuple[str, str], dict[str, Any]] = {}
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "ConfigMap" and isinstance(document.get("metadata"), dict):
            metadata = document["metadata"]
            data = document.get("data") if isinstance(document.get("data"), dict) else {}
            maps[(str(metadata.get("namespace") or default_namespace), str(metadata.get("name", "")))] = data
    return maps


def plan_stream(text: str, source: str, *, namespace: str | None = None, hf_token: str | None = None,
                hub_local_only: Callable[[], bool] = lambda: False) -> StreamReport:
    """Judge and plan every SpeculativeDeployment of `text`. Raises StreamError for a stream
    that is not YAML the API server would take, or holds no SpeculativeDeployment."""
    documents = _list_items(load_documents(text, source))
    default_namespace = namespace or "default"
    configmaps = _configmaps(documents, default_namespace)
    ours = [d for d in documents if _is_ours(d)]
    report = StreamReport(skipped=[_label(d) for d in documents if not _is_ours(d) and d.get("kind") != "ConfigMap"])
    if not ours:
        raise StreamError(f"{source} holds no {KIND} ({len(documents)} other document(s))")
    seen: set[tuple[str, str]] = set()
    for document in ours:
        parsed = parse_object(document, default_namespace=default_namespace, namespace_override=namespace)
        key = (parsed.namespace, parsed.name)
        duplicate = (error("object-invalid", "metadata.name", f"{parsed.namespace}/{parsed.name} appears twice in {source}: the second replaces the first", Stage.SPEC),) if key in seen and parsed.name else ()
        seen.add(key)
        result = _judge(parsed, configmaps, source, hf_token, hub_local_only)
        if duplicate:
            result = ObjectResult(result.name, result.namespace, duplicate + result.findings, None, [], result.unjudged)
        report.results.append(result)
    return report


def _judge(parsed: ParsedObject, configmaps: dict[tuple[str, str], dict[str, Any]], source: str,
           hf_token: str | None, hub_local_only: Callable[[], bool]) -> ObjectResult:
    from specdeploy.pipeline import evaluate
    from specdeploy.render import render_manifests
    from specdeploy.sources import SourceInvalid, SourceUnavailable, resolve_model, resolve_pair

    spec = parsed.spec
    if spec is None:
        return ObjectResult(parsed.name, parsed.namespace, parsed.findings, None, [])

    def configmap_reader(name: str, key: str) -> str:
        data = configmaps.get((parsed.namespace, name), {})
        if key not in data or not isinstance(data[key], str):
            raise SourceUnavailable("configMapRef", f"ConfigMap {parsed.namespace}/{name} with key {key} is not in {source}: "
                                                    "add it to the stream (kubectl create configmap --dry-run=client -o yaml) or inline the config")
        return data[key]

    def read(model: Any, where: str) -> Any:
        local_only = model.config is None and model.config_map_ref is None and hub_local_only()
        return resolve_model(model, where, hf_token=hf_token, configmap_reader=configmap_reader, local_only=local_only)

    try:
        target, draft = resolve_pair(spec, read)
    except SourceInvalid as exc:
        return ObjectResult(parsed.name, parsed.namespace, parsed.findings + (exc.finding(),), None, [])
    except SourceUnavailable as exc:
        hint = ": set HF_HUB_OFFLINE=1 with a filled cache, use a configMapRef in the stream, or inline the config"
        return ObjectResult(parsed.name, parsed.namespace, parsed.findings, None, [],
                            unjudged=(exc.finding(hint if exc.field.endswith(".model") else ""),))
    evaluation = evaluate(spec, target, draft)
    manifests: list[dict[str, Any]] = []
    if evaluation.ok and evaluation.plan is not None:
        manifests = render_manifests(spec, evaluation.plan, name=parsed.name, namespace=parsed.namespace)
    judged = (spec, evaluation.plan, target, draft) if manifests else None
    image_plan = evaluation.image_plan
    guess: tuple[Finding, ...] = ()
    if image_plan is not None:  # the guess refused: the image's vLLM judges
        judged, guess = (spec, image_plan.plan, target, draft), tuple(f for f in evaluation.findings if f.severity is Severity.ERROR)
    # A method only a preflight can judge: not judged here, and no manifests to apply (the operator
    # applies none before the preflight's verdict); `specdeploy preflight` can judge it.
    cannot_judge = tuple(f for f in evaluation.findings if f.code == METHOD_NEEDS_PREFLIGHT)
    findings = tuple(f for f in evaluation.findings if f.code != METHOD_NEEDS_PREFLIGHT)
    return ObjectResult(parsed.name, parsed.namespace, parsed.findings + findings, evaluation.plan_dict(),
                        [] if cannot_judge else manifests, unjudged=cannot_judge, vllm_version=evaluation.vllm_version, judged=judged,
                        guess=guess)
