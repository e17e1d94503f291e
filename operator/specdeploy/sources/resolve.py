"""One entry point: a spec's model source -> ModelInputs, whichever way it is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, TypeVar

from specdeploy.api.spec import DraftSpec, ModelSource, SpeculativeDeploymentSpec
from specdeploy.geometry import ModelInputs
from specdeploy.sources.errors import SourceError, SourceInvalid, SourceUnavailable
from specdeploy.sources.hub import read_hub
from specdeploy.sources.local import check_config_shape, parse_config_text, read_local

# (configmap name, key) -> the key's text; supplied by the controller, which owns the client.
ConfigMapReader = Callable[[str, str], str]
T = TypeVar("T")


def resolve_pair(spec: SpeculativeDeploymentSpec, read: Callable[[ModelSource | DraftSpec, str], T]) -> tuple[T, T | None]:
    """`read(source, field)` for the configs the pair needs: the target first (its error is the
    one reported), then the draft when it has its own checkpoint (ngram and suffix read none,
    mtp reads the target's layers). The CLI, the stream, the webhook and the reconcile each
    bring their own `read`; the reconcile's returns a job it awaits."""
    target = read(spec.target, "spec.target")
    draft = read(spec.draft, "spec.draft") if spec.draft.has_own_checkpoint else None
    return target, draft


def load_model_ref(ref: str, *, revision: str | None = None, token: str | None = None, field: str = "model",
                   local_only: bool = False) -> ModelInputs:
    """A config.json file, a directory holding one, or a Hub repo id (the CLI's T and D)."""
    path = Path(ref)
    if path_exists(path):
        config, weights = read_local(path, field)
        return ModelInputs(config=config, weight_bytes=weights)
    if ref.endswith(".json") or ref.startswith((".", "/")):
        raise SourceInvalid(field, f"{ref} does not exist")
    config, weights = read_hub(ref, revision, token, field, local_only=local_only)
    return ModelInputs(config=config, weight_bytes=weights)


def path_exists(path: Path) -> bool:
    """Path.exists, which raises for a name too long or a NUL byte: such a path exists nowhere."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def resolve_model(source: ModelSource | DraftSpec, field: str, *, hf_token: str | None = None,
                  configmap_reader: ConfigMapReader | None = None, local_only: bool = False,
                  local_files: bool = True) -> ModelInputs:
    """Inline config first, then a ConfigMap, then the model reference itself.
    `local_files=False` (the operator's reconcile and its webhook): a model that names a path is
    never read from this process's filesystem, and is refused on its form alone, so the verdict
    says nothing of what exists there; a path is for the CLI, or for the pod, which mounts it.
    `local_only`: read nothing over the network; with `local_files=False` (admission) a Hub
    model is then not judged (SourceUnavailable), with `local_files` the Hugging Face cache."""
    if source.config is not None:
        config = check_config_shape(source.config, f"{field}.config", "the inline config")
        return ModelInputs(config=json.loads(json.dumps(config)))
    if source.config_map_ref is not None:
        ref = source.config_map_ref
        if configmap_reader is None:
            raise SourceInvalid(f"{field}.configMapRef", "configMapRef needs the operator (or `plan` with a cluster); inline the config instead")
        try:
            text = configmap_reader(ref.name, ref.key)
        except SourceError as exc:  # readers know the ConfigMap, not which spec field asked
            raise type(exc)(f"{field}.configMapRef", exc.message) from exc
        return ModelInputs(config=parse_config_text(text, f"{field}.configMapRef", f"ConfigMap {ref.name} key {ref.key}"))
    if not source.model:
        raise SourceInvalid(f"{field}.model", "no model, config or configMapRef to read config.json from")
    if not local_files:
        if looks_like_path(source.model):
            raise SourceInvalid(f"{field}.model", f"{source.model!r} is a path: the operator reads no local files; "
                                "give the config inline (config) or in a ConfigMap (configMapRef)")
        if local_only:
            raise SourceUnavailable(f"{field}.model", f"{source.model} is read from the Hub, which admission does not wait for")
        config, weights = read_hub(source.model, source.revision, hf_token, f"{field}.model", direct=True)
        return ModelInputs(config=config, weight_bytes=weights)
    return load_model_ref(source.model, revision=source.revision, token=hf_token, field=f"{field}.model", local_only=local_only)


def looks_like_path(ref: str) -> bool:
    """A filesystem path rather than a Hub repo id (which is `name` or `org/name`, no dots
    first, at most one slash)."""
    return ref.startswith((".", "/", "~")) or "\\" in ref or ref.count("/") > 1 or ref.endswith(".json")
