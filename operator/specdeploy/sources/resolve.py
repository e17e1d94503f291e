"""One entry point: a spec's model source -> ModelInputs, whichever way it is given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from specdeploy.api.spec import DraftSpec, ModelSource
from specdeploy.geometry import ModelInputs
from specdeploy.sources.errors import SourceError, SourceInvalid
from specdeploy.sources.hub import read_hub
from specdeploy.sources.local import parse_config_text, read_local

# (configmap name, key) -> the key's text; supplied by the controller, which owns the client.
ConfigMapReader = Callable[[str, str], str]


def load_model_ref(ref: str, *, revision: str | None = None, token: str | None = None, field: str = "model",
                   local_only: bool = False) -> ModelInputs:
    """A config.json file, a directory holding one, or a Hub repo id (the CLI's T and D)."""
    path = Path(ref)
    if path.exists():
        config, weights = read_local(path, field)
        return ModelInputs(config=config, weight_bytes=weights, origin=str(path))
    if ref.endswith(".json") or ref.startswith((".", "/")):
        raise SourceInvalid(field, f"{ref} does not exist")
    config, weights = read_hub(ref, revision, token, field, local_only=local_only)
    return ModelInputs(config=config, weight_bytes=weights, origin=f"hub:{ref}")


def resolve_model(source: ModelSource | DraftSpec, field: str, *, hf_token: str | None = None,
                  configmap_reader: ConfigMapReader | None = None, local_only: bool = False) -> ModelInputs:
    """Inline config first, then a ConfigMap, then the model reference itself."""
    if source.config is not None:
        return ModelInputs(config=json.loads(json.dumps(source.config)), origin="inline")
    if source.config_map_ref is not None:
        ref = source.config_map_ref
        if configmap_reader is None:
            raise SourceInvalid(f"{field}.configMapRef", "configMapRef needs the operator (or `plan` with a cluster); inline the config instead")
        try:
            text = configmap_reader(ref.name, ref.key)
        except SourceError as exc:  # readers know the ConfigMap, not which spec field asked
            raise type(exc)(f"{field}.configMapRef", exc.message) from exc
        return ModelInputs(config=parse_config_text(text, f"{field}.configMapRef", f"ConfigMap {ref.name} key {ref.key}"), origin=f"configmap:{ref.name}")
    if not source.model:
        raise SourceInvalid(f"{field}.model", "no model, config or configMapRef to read config.json from")
    return load_model_ref(source.model, revision=source.revision, token=hf_token, field=f"{field}.model", local_only=local_only)
