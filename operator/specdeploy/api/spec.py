"""The SpeculativeDeployment spec (v1alpha1): one pydantic model is the CR schema, the
CLI's input and the operator's parsed view. The CRD is generated from these classes."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from specdeploy.api.errors import field_message, user_loc
from specdeploy.api.image_reference import IMAGE_INVALID, image_problem
from specdeploy.api.names import QUALIFIED_NAME_RULE, is_dns1123_subdomain, is_label_value, qualified_name_problem
from specdeploy.findings import did_you_mean
from specdeploy.vllm import DEFAULT_IMAGE, DEFAULT_VERSION
from specdeploy.vllm.methods import METHODS as METHOD_TABLE
from specdeploy.vllm.methods import Method as SpeculativeMethod
from specdeploy.vllm.methods import accepted_names, aliases, method_named, methods_where, misspelled, plugin_releases

API_GROUP = "specdeploy.io"
API_VERSION = "v1alpha1"
KIND = "SpeculativeDeployment"
PLURAL = "speculativedeployments"
SINGULAR = "speculativedeployment"
SHORT_NAMES = ["sdep"]

# The methods this operator plans for, and every alias a supported release accepts for one
# (specdeploy.vllm.methods). Which of them a release accepts is that release's fact: newer releases
# dropped medusa and mlp_speculator. Any other name of this shape may be a plugin's (where the release lets plugins register methods):
# the release-aware rules judge it (validation/rules.py), the schema only bounds it.
METHODS: tuple[str, ...] = accepted_names()

# Spec paths findings name (what a user edits).
TP_FIELD = "spec.parallelism.tensorParallelSize"
PP_FIELD = "spec.parallelism.pipelineParallelSize"
DRAFT_TP_FIELD = "spec.draft.tensorParallelSize"
MAX_NUM_SPECULATIVE_TOKENS = 64
# Far above any checkpoint (the largest are a few TB) or GPU (B300: 288 GB), far below what
# overflows the memory arithmetic (1e308 GiB in bytes is infinity).
MAX_WEIGHTS_GIB = 2**20  # 1 PiB
MAX_GPU_MEMORY_GIB = 2**14  # 16 TiB

# Value rules the CRD states in CEL (api/crd.py builds its rules from these same patterns), restated
# here so `specdeploy plan` and the webhook refuse what the API server would.
NO_SPACE_RE = r"\s"
RESOURCE_NAME_RE = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
QUANTITY_RE = r"^[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?$"


def _no_space(value: str) -> str:
    if re.search(NO_SPACE_RE, value):
        raise ValueError("must not contain whitespace")
    return value


def _matching(pattern: str, message: str) -> AfterValidator:
    def check(value: str) -> str:
        if not re.search(pattern, value):
            raise ValueError(f"{message}, got {value!r}")
        return value

    return AfterValidator(check)


def _not_empty(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    return value


def _image_reference(value: str) -> str:
    """What the kubelet cannot parse never reaches a pod (api/image_reference.py)."""
    problem = image_problem(value)
    if problem:
        raise PydanticCustomError(IMAGE_INVALID, problem)
    return value


NoSpace = Annotated[str, AfterValidator(_no_space)]
NonEmpty = Annotated[str, AfterValidator(_not_empty)]
ResourceName = Annotated[str, _matching(RESOURCE_NAME_RE, "must be an extended resource name like nvidia.com/gpu")]
Quantity = Annotated[str, _matching(QUANTITY_RE, "must be a Kubernetes quantity like 200Gi")]
METHOD_NAME_RE = r"^[a-z][a-z0-9_]*$"
METHOD_NAME_RULE = "must be a method name: lowercase letters, digits and _, starting with a letter"
MAX_METHOD_NAME = 64
# A typo of a listed method name, in every release: never left for a plugin to claim.
METHOD_MISSPELLED = "method-misspelled"


def _method_name(value: str) -> str:
    """A name within two edits of a listed method (eagel3, Eagle3, eagle-3) is that method
    misspelled, whatever the release: under plugins it would otherwise wait for a preflight."""
    meant = misspelled(value)
    if meant:
        raise PydanticCustomError(METHOD_MISSPELLED, f"{value!r} is not a method: {did_you_mean(meant)} "
                                  "(a plugin's method may not be within two edits of a built-in one)")
    if not re.search(METHOD_NAME_RE, value):
        raise ValueError(f"{METHOD_NAME_RULE}, got {value!r}")
    return value


Method = Annotated[str, Field(max_length=MAX_METHOD_NAME), AfterValidator(_method_name)]

Auto = Literal["auto"]
IntOrAuto = Union[Auto, int]


def check_int_or_auto(value: IntOrAuto) -> IntOrAuto:
    """'auto' or an integer >= 1 (the spec's validators and the CLI's flags share this)."""
    if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"must be 'auto' or an integer >= 1, got {value!r}")
    return value


def draft_model_rule(method: str) -> Literal["none", "optional", "required"]:
    """Whether `method` takes a draft checkpoint (the spec and the CLI phrase it each their way)."""
    return method_named(method).draft


def _method_description() -> str:
    """`draft.method`'s description, from the method table."""
    kinds = "; ".join(f"{m.name}: {m.summary}" for m in METHOD_TABLE.values())
    by_alias: dict[str, list[str]] = {}
    for alias, method in aliases().items():
        by_alias.setdefault(method, []).append(alias)
    named = "; ".join(f"{', '.join(names)} name {method} (vLLM rewrites them to it)" for method, names in by_alias.items())
    return (f"vLLM speculative method. {kinds}. No draft model: {', '.join(methods_where(draft='none'))}. "
            f"Without draft.model, {', '.join(m.name for m in METHOD_TABLE.values() if m.target_as_draft)} draft "
            f"from the target checkpoint itself. {named}. Any other name is taken only for an image whose vLLM lets "
            f"plugins register methods ({', '.join(plugin_releases())}), and only a preflight of that image can judge it; "
            "a name within two edits of one above is refused as a typo of it.")


def _draft_model_description() -> str:
    without = [m.name for m in METHOD_TABLE.values() if m.draft != "required"]
    return f"Draft Hub repo id or path. Required for every method except {', '.join(without)}."


class SpecModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are errors, not silence.
    Strict: types exactly as the CRD's schema has them (`replicas: "2"` is refused there too)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True
    )


class ConfigMapRef(SpecModel):
    name: str = Field(description="ConfigMap in the same namespace holding the model's config.json.", max_length=253)
    key: str = Field("config.json", description="Key inside the ConfigMap whose value is the config.json text.", max_length=253)


class ModelSource(SpecModel):
    """Where a model's weights live and where the operator reads its config.json."""

    model: NoSpace = Field(description="Hugging Face Hub repo id (org/name) or a path inside the image or model volume.", min_length=1, max_length=512)
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) for weights and config.", max_length=128)
    trust_remote_code: bool = Field(False, description="Pass --trust-remote-code to vLLM (needed by models that ship their own code, e.g. Kimi-K3).")
    config: dict[str, Any] | None = Field(None, description="The model's config.json inline, for clusters where the operator cannot reach the Hub.", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    config_map_ref: ConfigMapRef | None = Field(None, description="Read config.json from this ConfigMap instead of the Hub.")
    weights_gi_b: float | None = Field(None, alias="weightsGiB", gt=0, le=MAX_WEIGHTS_GIB, description="Total weight size in GiB; overrides the size read from the Hub's safetensors index or estimated from the config.")

    @model_validator(mode="after")
    def _one_config_source(self) -> "ModelSource":
        if self.config is not None and self.config_map_ref is not None:
            raise ValueError("set at most one of config and configMapRef")
        return self


class TargetSpec(ModelSource):
    pass


class DraftSpec(SpecModel):
    """The speculative method and, where it has one, the draft checkpoint."""

    method: Method = Field(description=_method_description())
    model: NoSpace | None = Field(None, description=_draft_model_description(), min_length=1, max_length=512)
    revision: str | None = Field(None, description="Hub revision of the draft.", max_length=128)
    trust_remote_code: bool = Field(False, description="Whether the draft's config needs remote code to parse (vLLM inherits the target's setting).")
    config: dict[str, Any] | None = Field(None, description="The draft's config.json inline.", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    config_map_ref: ConfigMapRef | None = Field(None, description="Read the draft's config.json from this ConfigMap.")
    weights_gi_b: float | None = Field(None, alias="weightsGiB", gt=0, le=MAX_WEIGHTS_GIB, description="Draft weight size in GiB, overriding the estimate.")
    num_speculative_tokens: IntOrAuto | None = Field(None, description="Tokens proposed per step (k), 1-64. Default: the draft config's block_size (dspark) or n_predict; required otherwise. auto: start from that default (or 3) and move to the k the goodput model recommends from the measured acceptance (status.speculation), at most once an hour, through a normal rollout.")
    tensor_parallel_size: IntOrAuto = Field("auto", description="Draft tensor parallel size: auto, 1, or equal to the target's. auto passes what vLLM defaults to (the target's; 1 for an MLPSpeculator). vLLM splits the draft's layers at the target's TP whatever this says, so the draft's heads must divide the target's TP.")
    speculative_config: dict[str, Any] = Field(default_factory=dict, description="Further vLLM SpeculativeConfig keys passed through (e.g. attention_backend, draft_sample_method). Keys the operator owns are refused.", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})

    @field_validator("tensor_parallel_size")
    @classmethod
    def _positive_tp(cls, value: IntOrAuto) -> IntOrAuto:
        return check_int_or_auto(value)

    @field_validator("num_speculative_tokens")
    @classmethod
    def _k_range(cls, value: IntOrAuto | None) -> IntOrAuto | None:
        if value is not None and value != "auto" and not 1 <= value <= MAX_NUM_SPECULATIVE_TOKENS:
            raise ValueError(f"must be 'auto' or an integer from 1 to {MAX_NUM_SPECULATIVE_TOKENS}, got {value}")
        return value

    @model_validator(mode="after")
    def _model_needed(self) -> "DraftSpec":
        if self.config is not None and self.config_map_ref is not None:
            raise ValueError("set at most one of config and configMapRef")
        rule = draft_model_rule(self.method)
        if rule == "none" and (self.model is not None or self.config is not None or self.config_map_ref is not None):
            raise ValueError(f"method {self.method} uses no draft model: remove draft.model/config/configMapRef")
        if rule == "required" and not self.model:
            raise ValueError(f"method {self.method} needs draft.model (a Hub repo id or a path)")
        return self

    @property
    def speculative_method(self) -> SpeculativeMethod:
        """The method's record, aliases resolved (deepseek_mtp -> mtp)."""
        return method_named(self.method)

    @property
    def passes_model(self) -> bool:
        """draft.model goes to vLLM as the speculative config's `model`."""
        return bool(self.model) and self.speculative_method.draft != "none"

    @property
    def has_own_checkpoint(self) -> bool:
        """draft.model is a checkpoint whose config.json the operator reads."""
        return self.passes_model and not self.speculative_method.model_names_class


class GpuSpec(SpecModel):
    product: str | None = Field(None, description="GPU product from the catalog, e.g. H100-80GB, H200-141GB, B200-180GB, MI300X-192GB (case-insensitive; the bare name is an alias where unambiguous).", max_length=64)
    memory_gi_b: float | None = Field(None, alias="memoryGiB", gt=0, le=MAX_GPU_MEMORY_GIB, description="GPU memory in GiB, for a GPU not in the catalog (overrides the product's).")
    per_node: int = Field(8, ge=1, le=64, description="GPUs per node; tensor parallelism is kept inside a node where possible.")
    resource_name: ResourceName | None = Field(None, description="Extended resource requested per pod. Default: the product's vendor's (nvidia.com/gpu, amd.com/gpu); nvidia.com/gpu when no product is named.", max_length=253)


QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"
VLLM_VERSION_RE = r"^\d+\.\d+\.\d+$"
# What each `pattern=` of these models allows, in words (api/errors.py quotes them).
PATTERN_WORDS = {QUANTITY: "a Kubernetes quantity like 500m, 4 or 16Gi", VLLM_VERSION_RE: f"a vLLM release X.Y.Z, e.g. {DEFAULT_VERSION}"}


class ResourcesSpec(SpecModel):
    gpu: GpuSpec = Field(default_factory=GpuSpec, description="The GPUs the model runs on.")
    cpu: str | None = Field(None, pattern=QUANTITY, max_length=32, description="CPU request of each vLLM pod (a Kubernetes quantity). Default: 2 + 2 per GPU in the pod (the API server, the engine core and one worker process per GPU each keep a core busy).")
    memory: str | None = Field(None, pattern=QUANTITY, max_length=32, description="Memory request of each vLLM pod (a Kubernetes quantity). Default: 16Gi + 8Gi per GPU in the pod (Python, tokenizer, pinned staging buffers and the weights' page cache while loading).")


class ParallelismSpec(SpecModel):
    tensor_parallel_size: IntOrAuto = Field("auto", description="Target tensor parallel size, or auto (smallest that is valid for both models and fits memory).")
    pipeline_parallel_size: IntOrAuto = Field("auto", description="Pipeline parallel size, or auto. Only methods that support it (not dspark or mtp).")

    @field_validator("tensor_parallel_size", "pipeline_parallel_size")
    @classmethod
    def _positive(cls, value: IntOrAuto) -> IntOrAuto:
        return check_int_or_auto(value)


KvCacheDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"]


class ServingSpec(SpecModel):
    max_model_len: int | None = Field(None, ge=1, description="Context length served (--max-model-len). Default: what vLLM derives from the target's config (max_position_embeddings and RoPE scaling).")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="Fraction of each GPU's memory vLLM may use for weights, activations and KV cache.")
    kv_cache_dtype: KvCacheDtype = Field("auto", description="KV cache dtype (--kv-cache-dtype); auto uses the model dtype.")
    min_concurrent_sequences: int = Field(1, ge=1, description="Sequences of maxModelLen tokens the KV cache must hold at once; the plan fails if it cannot.")


class SecretKeyRef(SpecModel):
    name: str = Field(description="Secret name in the same namespace.", max_length=253)
    key: str = Field("token", description="Key in the Secret.", max_length=253)


# validation.go IsEnvVarName: the name every supported Kubernetes takes (1.34 relaxes it).
ENV_NAME_RE = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"


class EnvVar(SpecModel):
    name: str = Field(description="Environment variable name.", max_length=256)
    value: str | None = Field(None, description="Literal value.", max_length=4096)
    value_from: dict[str, Any] | None = Field(None, description="A Kubernetes EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef).", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})

    # The API server checks these only when it gets the Deployment: refused there, the spec was
    # accepted and no pod ever came.
    @field_validator("name")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not re.match(ENV_NAME_RE, value):
            raise ValueError(f"{value[:80]!r} is not an environment variable name: letters, digits, '_', '-' and '.', not starting with a digit")
        return value

    @field_validator("value_from")
    @classmethod
    def _env_source(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        from kubernetes.client.models.v1_env_var_source import V1EnvVarSource

        if value is not None:
            _as_kubernetes(V1EnvVarSource, value, "")
            if len([v for v in value.values() if v is not None]) != 1:
                raise ValueError("must hold exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "EnvVar":
        if self.value and self.value_from is not None:
            raise ValueError("set value or valueFrom, not both")
        return self


class VllmSpec(SpecModel):
    extra_args: list[NonEmpty] = Field(default_factory=list, max_length=64, description="Extra vLLM CLI args, each one element. Flags the plan owns (--tensor-parallel-size, --speculative-config, ...) are refused.")
    env: list[EnvVar] = Field(default_factory=list, max_length=64, description="Extra environment variables for the vLLM container.")


class ModelCacheSpec(SpecModel):
    persistent_volume_claim: str | None = Field(None, description="Existing PVC mounted as the Hugging Face cache (shared across restarts).", max_length=253)
    size_limit: Quantity = Field("200Gi", description="Size limit of the emptyDir used when no PVC is named.", max_length=32)


GpuNodeAffinity = Literal["Required", "Off"]


class SchedulingSpec(SpecModel):
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node labels the vLLM pods must match.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, max_length=32, description="Pod tolerations (Kubernetes Toleration objects).", json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}})
    affinity: dict[str, Any] | None = Field(None, description="Pod affinity (a Kubernetes Affinity object).", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    priority_class_name: str | None = Field(None, description="PriorityClass of the vLLM pods.", max_length=253)
    runtime_class_name: str | None = Field(None, description="RuntimeClass of the vLLM pods (e.g. nvidia).", max_length=253)
    gpu_node_affinity: GpuNodeAffinity = Field("Required", description="Required (default): the vLLM pods may only run on nodes whose GPU is the one the plan was made for, by the labels of NVIDIA's GPU Feature Discovery (nvidia.com/gpu.product, nvidia.com/gpu.memory) or AMD's node labeller (amd.com/gpu.product-name); the requirements are added to every required term of `affinity`. Off: only `affinity` and `nodeSelector` place the pods (to replace the planned requirements with your own).")

    # What the pod spec takes of these, checked here: passed through unchecked, a bad value
    # was a spec the operator accepted and a Deployment the API server refused.
    @field_validator("node_selector")
    @classmethod
    def _node_labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            why = qualified_name_problem(key)
            if why:
                raise ValueError(f"{key!r} is not a label key: {why}")
            if not is_label_value(label):
                raise ValueError(f"{key}: {label[:80]!r} is not a label value (at most 63 characters; {QUALIFIED_NAME_RULE}, or empty)")
        return value

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from kubernetes.client.models.v1_toleration import V1Toleration  # the Kubernetes type, strict (pydantic)

        for index, item in enumerate(value):
            _as_kubernetes(V1Toleration, item, f"[{index}]")
        return value

    @field_validator("affinity")
    @classmethod
    def _affinity(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        from kubernetes.client.models.v1_affinity import V1Affinity

        if value is not None:
            _as_kubernetes(V1Affinity, value, "")
        return value

    @field_validator("priority_class_name", "runtime_class_name")
    @classmethod
    def _object_name(cls, value: str | None) -> str | None:
        if value and not is_dns1123_subdomain(value):  # empty: unset (the pod does not carry it)
            raise ValueError(f"{value[:80]!r} is not an object name (a DNS-1123 subdomain: lower-case letters, digits, '-' and '.')")
        return value


def _as_kubernetes(model: Any, value: Any, where: str) -> None:
    """Raise a ValueError naming the first field of `value` that the Kubernetes type refuses
    (an unknown field, a wrong type), as the API server would refuse the pod."""
    from pydantic import ValidationError

    try:
        model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in user_loc(first))
        what = "unknown field" if first["type"] == "extra_forbidden" else field_message([first], {})
        raise ValueError(f"{where}{'.' if where and path else ''}{path}: {what} (a Kubernetes {model.__name__[2:]})") from None


IntOrPercent = Union[int, str]


RolloutStrategy = Literal["RollingUpdate", "Canary"]
CanaryAction = Literal["Auto", "Promote", "Abort"]
ROLLOUT_STRATEGY_FIELD = "spec.rollout.strategy"


class CanarySpec(SpecModel):
    """How a new draft is tried on a share of the replicas before it replaces the stable one (docs/rollout.md)."""

    share: int = Field(10, ge=1, le=50, description="Percent of the serving replicas the canary gets, next to the stable ones (at least one pod): with N stable replicas the canary has max(1, round(N x share / (100 - share))) pods, and its traffic share follows its replica share behind the same Service.")
    margin: float = Field(0.1, ge=0, lt=1, description="How much worse than the stable draft the canary may be and still be promoted: its predicted speedup (acceptance counted by vLLM, goodput model) against (1 - margin) x the stable one's.")
    min_drafts: int = Field(100, ge=100, le=1_000_000, description="Drafts each arm must count before a decision; the decision then waits until a one-sided 95 % bound from the counts says not worse or worse (never a time).")
    action: CanaryAction = Field("Auto", description="Auto: the counters decide. Promote: promote the spec's draft now (also one the operator rolled back). Abort: roll the canary back now. Promote applies to every later draft change too while it is set: set Auto again after.")


class RolloutSpec(SpecModel):
    max_surge: IntOrPercent = Field(0, description="Extra pods during a rollout. Default 0: GPUs are scarce, so a surge pod would wait for GPUs that the old pod holds.")
    max_unavailable: IntOrPercent = Field(1, description="Pods that may be down during a rollout.")
    strategy: RolloutStrategy = Field("RollingUpdate", description="RollingUpdate (default, the behaviour before canaries): a new draft replaces the old one by a rolling update. Canary: a change of spec.draft starts a canary workload with the new draft next to the stable one, and vLLM's acceptance counters decide whether it is promoted or rolled back (docs/rollout.md). Single-node plans only.")
    canary: CanarySpec = Field(default_factory=CanarySpec, description="The canary's share, margin and manual promote or abort (strategy: Canary).")

    @field_validator("max_surge", "max_unavailable")
    @classmethod
    def _count_or_percent(cls, value: IntOrPercent) -> IntOrPercent:
        if isinstance(value, int) and value < 0:
            raise ValueError("must be >= 0")
        if isinstance(value, str) and not (value.endswith("%") and value[:-1].isdigit()):
            raise ValueError(f"must be an integer or a percentage like '25%', got {value!r}")
        return value


PreflightMode = Literal["Required", "BestEffort", "Disabled"]


class PreflightResourcesSpec(SpecModel):
    cpu: str = Field("1", pattern=QUANTITY, max_length=32, description="CPU request of the preflight pod (a Kubernetes quantity). It only parses args and builds the models on the meta device.")
    memory: str = Field("4Gi", pattern=QUANTITY, max_length=32, description="Memory request and limit of the preflight pod: vLLM's import plus the meta-device build, no weights (0.7 GiB for Kimi-K3 + DSpark on the CPU build, bench/RESULTS.md; a CUDA image maps larger libraries).")


class PreflightSpec(SpecModel):
    """The image's own vLLM judges the exact pod args on CPU before any GPU workload is created."""

    mode: PreflightMode = Field("BestEffort", description="Required: no GPU workload until the image's vLLM accepts the args. BestEffort: as Required, but when the preflight Job cannot run (image pull failure, no capacity, its deadline) the fast rules decide and a condition says so. Disabled: the fast rules alone decide.")
    resources: PreflightResourcesSpec = Field(default_factory=PreflightResourcesSpec, description="CPU and memory of the preflight pod (it requests no GPU).")
    deadline_seconds: int = Field(1800, ge=60, le=86400, description="activeDeadlineSeconds of the preflight Job: pulling a multi-GB vLLM image on a new node is most of it.")


# A Service name (the endpoint picker's): a DNS-1035 label.
SERVICE_NAME_RE = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
EndpointPickerFailureMode = Literal["FailClose", "FailOpen"]


class EndpointPickerSpec(SpecModel):
    """The endpoint picker the gateway asks which pod of the pool takes each request."""

    name: str = Field(description="Service of the endpoint picker in the same namespace: an EPP of the Gateway API Inference Extension (or llm-d's inference scheduler) started with --pool-name set to this pool's name (the workload's name, status.workload).",
                      min_length=1, max_length=63, pattern=SERVICE_NAME_RE)
    port: int = Field(9002, ge=1, le=65535, description="The Service port of the endpoint picker's gRPC (ext-proc) server; 9002 is the EPP's default.")
    failure_mode: EndpointPickerFailureMode = Field("FailClose", description="When the picker does not answer: FailClose (the default) refuses the request, FailOpen lets the gateway send it to any pod of the pool.")


class RoutingSpec(SpecModel):
    """Opt-in: the serving pods as an InferencePool (Gateway API Inference Extension,
    inference.networking.k8s.io/v1), so a gateway's HTTPRoute can send traffic to them."""

    endpoint_picker: EndpointPickerSpec | None = Field(None, description="The pool's endpointPickerRef. Unset: the pool has none, for gateways that pick endpoints themselves.")


class SpeculativeDeploymentSpec(SpecModel):
    """Desired state: a target model served by vLLM with a speculative draft attached."""

    target: TargetSpec = Field(description="The model being served.")
    draft: DraftSpec = Field(description="The speculative decoding method and draft model.")
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec, description="GPUs per pod.")
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec, description="Tensor and pipeline parallelism of the target.")
    serving: ServingSpec = Field(default_factory=ServingSpec, description="Serving limits that size the KV cache.")
    replicas: int = Field(1, ge=0, le=1000, description="Number of serving replicas (each may span several nodes).")
    image: Annotated[str, AfterValidator(_not_empty), AfterValidator(_no_space), AfterValidator(_image_reference)] = Field(DEFAULT_IMAGE, description="vLLM OpenAI-server image; its entrypoint must be `vllm serve`. Its release tag (vX.Y.Z, X.Y.Z, vX.Y.Z-cu130) decides which vLLM release's rules judge the spec, unless vllmVersion is set.", max_length=512)
    vllm_version: str | None = Field(None, description="The vLLM release the image runs (X.Y.Z), for images whose tag is not a release tag (latest, nightly, a digest, a private build). Its rules judge the spec.", pattern=VLLM_VERSION_RE, max_length=32)
    vllm: VllmSpec = Field(default_factory=VllmSpec, description="Extra vLLM args and environment.")
    hf_token_secret_ref: SecretKeyRef | None = Field(None, description="Secret holding a Hugging Face token, injected as HF_TOKEN via secretKeyRef only.")
    model_cache: ModelCacheSpec = Field(default_factory=ModelCacheSpec, description="Volume for the Hugging Face model cache.")
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec, description="Where the vLLM pods run.")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="Rolling update limits.")
    routing: RoutingSpec | None = Field(None, description="Set (routing: {} at least) to render an InferencePool of the Gateway API Inference Extension (its CRD must be installed) named like the workload, selecting the serving pods on vLLM's port 8000, for a gateway's HTTPRoute to use as a backend; removed again when unset. docs/routing.md.")
    preflight: PreflightSpec = Field(default_factory=PreflightSpec, description="Before the first GPU workload of a new image, args and configs: a CPU Job from spec.image runs the image's own vLLM on the exact args (spec.scheduling places it, so it also pre-pulls the image).")
