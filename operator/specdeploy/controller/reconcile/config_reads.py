"""How a reconcile reads its models' configs: inline ones parsed in the CPU pool, ConfigMaps
read on the loop (asyncio client) and parsed off it, Hub configs in the I/O pool with one job
per (model, revision, token), and the last good config kept when a refresh fails transiently
(`state.ConfigCache`), so a Hub outage never flips a serving model."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Awaitable, Callable

from specdeploy.api.spec import DraftSpec, ModelSource, SpeculativeDeploymentSpec
from specdeploy.controller.process.kube import Kube, KubeTemporaryError, request_timeout
from specdeploy.controller.reconcile.offload import OffLoop
from specdeploy.controller.reconcile.state import ConfigCache
from specdeploy.pipeline import ModelInputs
from specdeploy.sources import SourceUnavailable, resolve_model, resolve_pair

# A ConfigMap read gives up sooner than other API calls: a read that hangs must end as
# "refresh retrying" (the last good config kept) well inside the reconcile's time budget.
CONFIG_READ_TIMEOUT_S = 10.0
Read = tuple[ModelInputs, SourceUnavailable | None]  # the config, and the refresh error when it is the last good one


def source_key(source: ModelSource | DraftSpec, namespace: str) -> tuple[str, ...]:
    """What identifies a config between reconciles (the cache key)."""
    if source.config_map_ref is not None:
        ref = source.config_map_ref
        return ("configmap", namespace, ref.name, ref.key)
    return ("model", source.model or "", source.revision or "")


@dataclass
class ConfigReads:
    """The reads of one reconcile, in one namespace with one Hub token."""

    kube: Kube
    offload: OffLoop
    configs: ConfigCache
    namespace: str
    token: str | None = None

    async def pair(self, spec: SpeculativeDeploymentSpec) -> tuple[ModelInputs, ModelInputs | None, SourceUnavailable | None]:
        """Target and draft configs, and the first refresh error when a last good one stands in."""
        if spec.hf_token_secret_ref is not None:
            ref = spec.hf_token_secret_ref
            self.token = await self.kube.read_secret_key(self.namespace, ref.name, ref.key)
        target_job, draft_job = resolve_pair(spec, lambda source, where: functools.partial(self.read, source, where))
        target, stale = await target_job()
        draft = None
        if draft_job is not None:
            draft, draft_stale = await draft_job()
            stale = stale or draft_stale
        return target, draft, stale

    async def read(self, source: ModelSource | DraftSpec, where: str) -> Read:
        if source.config is not None:
            return await self._fetch(source, where), None
        job: Callable[[], Awaitable[ModelInputs]] = functools.partial(self._fetch, source, where)
        return await self.configs.read(source_key(source, self.namespace), job, SourceUnavailable)  # type: ignore[return-value]

    async def _fetch(self, source: ModelSource | DraftSpec, where: str) -> ModelInputs:
        text = None
        if source.config is None and source.config_map_ref is not None:  # read on the loop, parse off it
            ref = source.config_map_ref
            text = await self._config_map_text(f"{where}.configMapRef", ref.name, ref.key)
        resolve = functools.partial(resolve_model, source, where, hf_token=self.token,
                                    configmap_reader=lambda _name, _key: text, local_files=False)
        if source.config is not None or text is not None:
            return await self.offload.run(self.offload.cpu, None, resolve)
        # A Hub read blocks on the network: the I/O pool, one job per (model, revision, token).
        who = hashlib.sha256(self.token.encode()).hexdigest()[:16] if self.token else ""
        return await self.offload.run(self.offload.io, ("hub", where, *source_key(source, self.namespace), who), resolve)

    async def _config_map_text(self, field: str, name: str, key: str) -> str:
        try:
            text = await self.kube.read_config_map_key(self.namespace, name, key,
                                                       timeout=min(CONFIG_READ_TIMEOUT_S, request_timeout()[1]))
        except KubeTemporaryError as exc:
            raise SourceUnavailable(field, str(exc)) from exc
        if text is None:  # may be created after the CR (GitOps ordering): retry
            raise SourceUnavailable(field, f"ConfigMap {self.namespace}/{name} or its key {key!r} does not exist yet")
        return text
