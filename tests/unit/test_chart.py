"""The Helm chart, checked with a real helm binary and the real Kubernetes schemas.

helm is the one the real control plane uses: built from the Go module proxy at the version
hack/cluster/helm/go.mod pins (hack/cluster/build.sh helm), cached outside the clone.
Every documented values set (default + charts/specdeploy/ci/*.yaml) must lint clean with
--strict and render objects that pass kubernetes-validate in strict mode for several Kubernetes
minor versions. The RBAC the chart renders must grant exactly what the operator's code declares
(specdeploy.controller.process.permissions), the CRD must be the file in crds/, and every flag the chart
passes must be one `specdeploy run` accepts.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "specdeploy"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
VALUES_SETS = [None, *CI_VALUES]
VALUES_IDS = ["default", *(p.stem for p in CI_VALUES)]
# The chart's minimum (Chart.yaml kubeVersion: CEL in the CRD is GA since 1.29), one in the
# middle, and the newest schema kubernetes-validate ships.
KUBE_VERSIONS = ["1.29.0", "1.33.0", "1.37.0"]
RELEASE, NAMESPACE = "sd", "specdeploy-system"
WEBHOOK_CERTIFICATE_RBAC = "-webhook-certificate"  # the Role/ClusterRole of the certificate the operator keeps
STANDARD_LABELS = {
    "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by", "app.kubernetes.io/component", "app.kubernetes.io/part-of",
    "helm.sh/chart",
}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


binaries = _load(REPO_ROOT / "hack" / "cluster" / "binaries.py")
sync_chart = _load(REPO_ROOT / "scripts" / "sync_chart.py")


@pytest.fixture(scope="session")
def helm() -> Path:
    """The pinned helm binary (built from the Go module proxy on first use, then cached)."""
    return binaries.helm()


@cache
def _run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)


def render(helm: Path, values: Path | None = None, *extra: str, kube_version: str = "1.35.0") -> list[dict]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds",
            "--kube-version", kube_version, *extra]
    if values is not None:
        args += ["--values", str(values)]
    proc = _run_helm(helm, *args)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def values_of(values: Path | None) -> dict:
    merged = yaml.safe_load((CHART / "values.yaml").read_text())
    if values is not None:
        _merge(merged, yaml.safe_load(values.read_text()))
    return merged


def _merge(base: dict, over: dict) -> None:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


# --- helm lint / template -----------------------------------------------------------------


def test_helm_is_the_pinned_v4(helm):
    reported = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True, check=True).stdout
    assert reported.split("+")[0].strip() == binaries.helm_version()
    assert binaries.helm_version().startswith("v4.")


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_helm_lint_strict_is_clean(helm, values):
    args = ["lint", "--strict", str(CHART)] + (["--values", str(values)] if values else [])
    proc = _run_helm(helm, *args)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "[WARNING]" not in output and "[ERROR]" not in output, output
    assert "1 chart(s) linted, 0 chart(s) failed" in output


def test_every_values_set_is_documented():
    """Each ci/ values file is one of the sets docs/install.md describes."""
    doc = (REPO_ROOT / "docs" / "install.md").read_text()
    assert {p.stem for p in CI_VALUES} == {"cluster-wide-values", "namespaced-values", "observability-values", "secrets-values",
                                          "webhook-values"}
    for path in CI_VALUES:
        assert f"ci/{path.name}" in doc


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_rendered_objects_pass_kubernetes_validate_strict(helm, values, kube_version):
    objects = render(helm, values, kube_version=kube_version)
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "ServiceAccount", "Deployment"} <= kinds
    for obj in objects:
        if obj["apiVersion"] == PROMETHEUS_OPERATOR:
            _check_prometheus_operator_object(obj)
            continue
        # Raises ValidationError on an unknown field or a wrong type; SchemaNotFoundError on a
        # kind this Kubernetes version does not have.
        kubernetes_validate.validate(obj, kube_version, strict=True)


# The Prometheus Operator's kinds (monitoring.coreos.com/v1): no schema for them is available
# offline, so their spec is held to the fields the chart may set; a PrometheusRule's groups are
# checked by promtool (tests/unit/test_alert_rules.py).
PROMETHEUS_OPERATOR = "monitoring.coreos.com/v1"
PROMETHEUS_OPERATOR_SPEC = {
    "ServiceMonitor": {"selector", "endpoints", "namespaceSelector", "jobLabel"},
    "PodMonitor": {"selector", "namespaceSelector", "podMetricsEndpoints", "jobLabel", "podTargetLabels", "sampleLimit"},
    "PrometheusRule": {"groups"},
}
ENDPOINT_FIELDS = {"port", "path", "interval", "scrapeTimeout", "scheme", "honorLabels", "relabelings"}


def _check_prometheus_operator_object(obj: dict) -> None:
    spec = obj["spec"]
    assert set(spec) <= PROMETHEUS_OPERATOR_SPEC[obj["kind"]], (obj["kind"], set(spec))
    for endpoint in spec.get("endpoints", []) + spec.get("podMetricsEndpoints", []):
        assert set(endpoint) <= ENDPOINT_FIELDS, endpoint
    for group in spec.get("groups", []):
        assert set(group) <= {"name", "interval", "rules"} and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations"}, rule


def test_kube_version_below_the_minimum_is_refused(helm):
    proc = _run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", "1.28.0")
    assert proc.returncode != 0
    assert "kubeVersion" in proc.stderr or "incompatible" in proc.stderr


@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "replicas=0"],
        ["--set", "logFormat=xml"],
        ["--set", "metrics.serviceMonitor.interval=often"],
        ["--set", "metrics.vllmPodMonitor.enabled=maybe"],
        ["--set", "metrics.vllmPodMonitor.port=http"],
        ["--set", "watchNamespaces[0]=Not_A_Namespace"],
        ["--set", "image.pullPolicy=Sometimes"],
        ["--set", "image.digest=latest"],
        ["--set", "rbac.secrets.enabled=yes-please"],
        ["--set", "resources.limits.memory=lots"],
        ["--set", "reconcileTimeBudgetSeconds=0"],
        ["--set", "webhook.networkPolicy.enabled=maybe"],
        ["--set-json", 'webhook.networkPolicy.from=[{"ipBlok": {"cidr": "10.0.0.0/8"}}]'],
        ["--set", "metrics.prometheusRule.enabled=maybe"],
        ["--set", "metrics.grafanaDashboard.namespace=Not_A_Namespace"],
        ["--set", "metrics.grafanaDashboard.labels=null"],  # the sidecar would never find it
    ],
)
def test_values_schema_rejects_bad_values(helm, bad):
    proc = _run_helm(helm, "template", RELEASE, str(CHART), *bad)
    assert proc.returncode != 0
    assert "schema" in proc.stderr.lower(), proc.stderr


# --- CRD and generated files --------------------------------------------------------------


def test_chart_crd_is_byte_identical_to_crds_dir():
    source = REPO_ROOT / "crds" / sync_chart.CRD_NAME
    assert sync_chart.CHART_CRD.read_bytes() == source.read_bytes(), "run `make crd` (scripts/sync_chart.py)"
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == [sync_chart.CRD_NAME]


def test_rendered_crd_is_the_crds_file(helm):
    rendered = by_kind(render(helm), "CustomResourceDefinition")
    source = yaml.safe_load((REPO_ROOT / "crds" / sync_chart.CRD_NAME).read_text())
    assert rendered == [source]


def test_rbac_rules_file_is_generated_from_the_declared_permissions():
    assert sync_chart.RBAC_RULES.read_text() == sync_chart.rbac_rules_text(), "run `make crd` (scripts/sync_chart.py)"
    assert sync_chart.main(["--check"]) == 0


# --- RBAC ---------------------------------------------------------------------------------


def _permission_triples(with_secrets: bool) -> set[tuple[str, str, str]]:
    from specdeploy.controller.process.permissions import PERMISSIONS, SECRETS_PERMISSION

    perms = PERMISSIONS + ((SECRETS_PERMISSION,) if with_secrets else ())
    return {(p.api_group, p.resource, verb) for p in perms for verb in p.verbs}


def _rule_triples(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def _no_wildcards(rules: list[dict]) -> None:
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert all("*" not in item for item in rule.get(key, [])), rule
        assert "nonResourceURLs" not in rule


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_rbac_grants_exactly_the_declared_permissions(helm, values):
    objects = render(helm, values)
    vals = values_of(values)
    wanted = _permission_triples(with_secrets=vals["rbac"]["secrets"]["enabled"])
    sa = by_kind(objects, "ServiceAccount")[0]["metadata"]["name"]
    objects = [o for o in objects if not o["metadata"]["name"].endswith(WEBHOOK_CERTIFICATE_RBAC)]  # its own test
    cluster_roles, roles = by_kind(objects, "ClusterRole"), by_kind(objects, "Role")
    for role in cluster_roles + roles:
        _no_wildcards(role["rules"])
        assert _rule_triples(role["rules"]) == wanted, role["metadata"]
    if vals["watchNamespaces"]:
        # Namespaced: no cluster-wide grant at all (the operator declares no cluster-scoped
        # resource), one Role + RoleBinding in each watched namespace, nowhere else.
        assert cluster_roles == [] and by_kind(objects, "ClusterRoleBinding") == []
        assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(vals["watchNamespaces"])
        bindings = by_kind(objects, "RoleBinding")
        assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(vals["watchNamespaces"])
    else:
        assert roles == [] and by_kind(objects, "RoleBinding") == []
        assert len(cluster_roles) == 1
        bindings = by_kind(objects, "ClusterRoleBinding")
        assert len(bindings) == 1
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
        role_kind = "Role" if vals["watchNamespaces"] else "ClusterRole"
        assert binding["roleRef"]["kind"] == role_kind
        assert binding["roleRef"]["name"] in {r["metadata"]["name"] for r in cluster_roles + roles}


def test_secrets_are_opt_in_and_narrowed_by_resource_names(helm):
    default = render(helm)
    assert not any(
        "secrets" in rule["resources"] for role in by_kind(default, "ClusterRole") for rule in role["rules"]
    )
    opted = render(helm, CHART / "ci" / "secrets-values.yaml")
    for role in by_kind(opted, "Role"):
        secret_rules = [rule for rule in role["rules"] if "secrets" in rule["resources"]]
        assert secret_rules == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                                 "resourceNames": ["hf-token", "hf-token-gated"]}]
    # Cluster-wide opt-in without names: one rule, still only `get`.
    wide = render(helm, None, "--set", "rbac.secrets.enabled=true")
    (role,) = by_kind(wide, "ClusterRole")
    assert [r for r in role["rules"] if "secrets" in r["resources"]] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


def test_secret_reading_is_switched_on_in_the_operator_exactly_when_rbac_allows_it(helm):
    from specdeploy.controller.process.main import READ_SECRETS_ENV

    for values in VALUES_SETS:
        env = {e["name"]: e.get("value") for e in _container(render(helm, values))["env"]}
        if values_of(values)["rbac"]["secrets"]["enabled"]:
            assert env.get(READ_SECRETS_ENV) == "true"
        else:
            assert READ_SECRETS_ENV not in env


def test_the_preflight_is_on_unless_the_chart_switches_it_off(helm):
    """preflight.enabled=false reaches the operator as the switch it reads; by default the
    operator runs the preflight (no variable: controller/reconcile/preflight_gate.py's default is on)."""
    from specdeploy.controller.reconcile.preflight_gate import PREFLIGHT_ENV, enabled

    default = {e["name"]: e.get("value") for e in _container(render(helm, None))["env"]}
    assert PREFLIGHT_ENV not in default
    off = {e["name"]: e.get("value") for e in _container(render(helm, None, "--set", "preflight.enabled=false"))["env"]}
    assert off[PREFLIGHT_ENV] == "false"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PREFLIGHT_ENV, off[PREFLIGHT_ENV])
        assert not enabled()


def test_rbac_can_be_left_to_the_cluster_admin(helm):
    objects = render(helm, None, "--set", "rbac.create=false", "--set", "serviceAccount.create=false",
                     "--set", "serviceAccount.name=existing-sa")
    assert not {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} & {o["kind"] for o in objects}
    (dep,) = by_kind(objects, "Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "existing-sa"


# --- the operator Deployment --------------------------------------------------------------


def _container(objects: list[dict]) -> dict:
    (dep,) = by_kind(objects, "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_deployment_is_two_leader_electing_replicas_with_restricted_pod_security(helm, values):
    objects = render(helm, values)
    (dep,) = by_kind(objects, "Deployment")
    spec, pod = dep["spec"], dep["spec"]["template"]["spec"]
    assert spec["replicas"] == 2 and spec["strategy"]["type"] == "RollingUpdate"
    env = {e["name"]: e.get("value") for e in _container(objects)["env"]}
    assert env["SPECDEPLOY_LEADER_ELECTION"] == "true"
    watched = values_of(values).get("watchNamespaces") or []
    assert env["SPECDEPLOY_LEASE_NAMESPACE"] == (watched[0] if watched else NAMESPACE)
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == spec["selector"] and pdb["spec"]["maxUnavailable"] == 1
    assert _container(objects)["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    (svc,) = [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-metrics")]
    assert svc["spec"]["ports"][0]["targetPort"] == "metrics"
    assert len(by_kind(objects, "ServiceMonitor")) == int(values_of(values)["metrics"]["serviceMonitor"]["enabled"])
    assert pod["enableServiceLinks"] is False
    # Pod Security Standard "restricted", field by field.
    psc, csc = pod["securityContext"], _container(objects)["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] != 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"] == {"drop": ["ALL"]}
    assert csc["readOnlyRootFilesystem"] is True and csc["runAsNonRoot"] is True
    assert not any(k in pod for k in ("hostNetwork", "hostPID", "hostIPC"))
    # The only writable path is an emptyDir on /tmp (HOME and HF_HOME point there in the image).
    # With the webhook, its certificate is mounted read-only too.
    container = _container(objects)
    webhook = values_of(values)["webhook"]["enabled"]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}] + (
        [{"name": "webhook-tls", "mountPath": "/tls", "readOnly": True}] if webhook else [])
    tmp, *others = pod["volumes"]
    assert tmp["name"] == "tmp" and "emptyDir" in tmp
    assert all("secret" in v for v in others) and len(others) == int(webhook)
    res = container["resources"]
    assert set(res) == {"requests", "limits"} and {"cpu", "memory"} <= set(res["requests"]) & set(res["limits"])


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_args_select_namespaces_and_the_liveness_endpoint_the_probe_uses(helm, values):
    container = _container(render(helm, values))
    vals = values_of(values)
    args = container["args"]
    port = vals["operator"]["healthPort"]
    assert f"--liveness=http://0.0.0.0:{port}/healthz" in args
    probe = container["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[probe["port"]] == port
    if vals["watchNamespaces"]:
        assert [a for a in args if a.startswith("--namespace=")] == [f"--namespace={ns}" for ns in vals["watchNamespaces"]]
        assert "--all-namespaces" not in args
    else:
        assert "--all-namespaces" in args and not any(a.startswith("--namespace") for a in args)


def test_image_tag_defaults_to_app_version_and_digest_pins(helm):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == "0.1.0"
    assert _container(render(helm))["image"] == f"ghcr.io/specdeploy/specdeploy:{chart['appVersion']}"
    assert _container(render(helm, None, "--set", "image.tag=dev"))["image"].endswith(":dev")
    pinned = _container(render(helm, CHART / "ci" / "cluster-wide-values.yaml"))["image"]
    assert pinned == "registry.example.com/ml/specdeploy@sha256:" + "0123456789abcdef" * 4


def test_app_version_matches_the_package_version():
    import tomllib

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


def test_hub_token_comes_only_through_secret_key_ref(helm):
    env = _container(render(helm, CHART / "ci" / "secrets-values.yaml"))["env"]
    (hf,) = [e for e in env if e["name"] == "HF_TOKEN"]
    assert hf == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "specdeploy-hub-token", "key": "token"}}}
    assert not any(e["name"] == "HF_TOKEN" for e in _container(render(helm))["env"])


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_every_object_carries_the_standard_labels(helm, values):
    for obj in render(helm, values):
        if obj["kind"] == "CustomResourceDefinition":
            continue  # crds/ is installed verbatim by Helm, never templated
        labels = obj["metadata"]["labels"]
        assert STANDARD_LABELS <= set(labels), (obj["kind"], labels)
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


# --- the chart and the operator's command line agree --------------------------------------


def _run_help() -> str:
    if importlib.util.find_spec("specdeploy.cli") is None:
        pytest.skip("operator/specdeploy/cli/ does not exist yet")
    proc = subprocess.run([sys.executable, "-m", "specdeploy.cli", "run", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_every_flag_the_chart_passes_is_one_specdeploy_run_accepts(helm, values):
    help_text = _run_help()
    for arg in _container(render(helm, values))["args"]:
        flag = arg.split("=", 1)[0]
        assert flag.startswith("--") and flag in help_text, f"`specdeploy run` has no {flag}"


def test_values_schema_is_valid_json_schema():
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)
    for path in CI_VALUES:
        jsonschema.validate(values_of(path), schema)


def test_cr_reference_is_generated_from_the_crd():
    gen = _load(REPO_ROOT / "scripts" / "gen_cr_reference.py")
    assert gen.main(["--check"]) == 0, "docs/cr-reference.md is stale: run `make crd`"
    text = (REPO_ROOT / "docs" / "cr-reference.md").read_text()
    crd = yaml.safe_load((REPO_ROOT / "crds" / sync_chart.CRD_NAME).read_text())
    spec_props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for name in spec_props:
        assert f"| `spec.{name}` |" in text


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_the_cli_parses_the_chart_args_into_the_intended_watch_scope(helm, values):
    """Beyond flag names: `specdeploy run`'s own parser reads the rendered args as meant."""
    _run_help()
    from specdeploy import cli

    args = cli._parser().parse_args(["run", *_container(render(helm, values))["args"]])
    vals = values_of(values)
    assert args.namespace == vals["watchNamespaces"]
    assert args.all_namespaces is (not vals["watchNamespaces"])
    assert args.liveness == f"http://0.0.0.0:{vals['operator']['healthPort']}/healthz"


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_notes_render_and_name_the_watch_scope(helm, values):
    # A client-side dry run renders NOTES.txt (helm template does not); it assumes the
    # Kubernetes version helm was stamped with (build.sh: v1.36.3), above the chart's minimum.
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"] + (
        ["--values", str(values)] if values else [])
    proc = _run_helm(helm, *args)
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    watched = values_of(values)["watchNamespaces"]
    assert (", ".join(watched) if watched else "every namespace") in notes
    assert "helm show crds" in notes


def test_packaged_chart_renders_the_same_as_the_source_tree(helm, tmp_path):
    """`helm package` keeps crds/, files/ and values.schema.json (nothing lost to .helmignore)."""
    proc = subprocess.run([str(helm), "package", str(CHART), "--destination", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (package,) = tmp_path.glob("specdeploy-*.tgz")
    for values in VALUES_SETS:
        packaged = subprocess.run(
            [str(helm), "template", RELEASE, str(package), "--namespace", NAMESPACE, "--include-crds",
             "--kube-version", "1.35.0"] + (["--values", str(values)] if values else []),
            capture_output=True, text=True, timeout=120)
        assert packaged.returncode == 0, packaged.stderr
        assert [d for d in yaml.safe_load_all(packaged.stdout) if d] == render(helm, values)


@pytest.mark.parametrize("sets", [(), ("webhook.enabled=true",), ("webhook.enabled=true", "webhook.certManager.enabled=true")],
                         ids=["default", "webhook", "webhook-cert-manager"])
def test_two_renders_of_the_same_input_are_the_same(helm, sets):
    """GitOps (Argo CD renders without a cluster) sees no drift: nothing is generated at render."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *[a for s in sets for a in ("--set", s)]]
    first, second = (subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120) for _ in range(2))
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


# --- the admission webhook ------------------------------------------------------------------


def _webhook_objects(helm, *sets: str) -> list[dict]:
    return render(helm, None, "--set", "webhook.enabled=true", *[a for s in sets for a in ("--set", s)])


def test_webhook_is_off_by_default(helm):
    assert not by_kind(render(helm), "ValidatingWebhookConfiguration")


def test_webhook_with_the_certificate_the_operator_keeps(helm):
    from specdeploy.controller.admission.certificates import CONFIGURATION_ENV, SECRET_ENV, SERVICE_ENV
    from specdeploy.controller.admission.webhook import CERT_DIR_ENV, HANDLER_ID, PORT_ENV

    objects = _webhook_objects(helm)
    (config,) = by_kind(objects, "ValidatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    assert hook["clientConfig"]["service"]["path"] == f"/{HANDLER_ID}" and "caBundle" not in hook["clientConfig"]
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert not [o for o in by_kind(objects, "Secret") if o.get("type") == "kubernetes.io/tls"]  # the operator's to write
    service = next(o for o in by_kind(objects, "Service") if o["metadata"]["name"] == hook["clientConfig"]["service"]["name"])
    (deployment,) = by_kind(objects, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[PORT_ENV] == "9443" and env[CERT_DIR_ENV] == "/tls"
    assert (env[SERVICE_ENV], env[CONFIGURATION_ENV]) == (service["metadata"]["name"], config["metadata"]["name"])
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]
    assert service["spec"]["ports"][0]["targetPort"] == "webhook"
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "webhook-tls")
    assert volume["secret"] == {"secretName": env[SECRET_ENV], "optional": True}
    # Its RBAC is exactly WEBHOOK_CERTIFICATE_PERMISSIONS, get/patch narrowed to the two names.
    rules = [r for o in objects if o["kind"] in ("Role", "ClusterRole") and o["metadata"]["name"].endswith(WEBHOOK_CERTIFICATE_RBAC)
             for r in o["rules"]]
    assert _rule_triples(rules) == _webhook_certificate_triples()
    assert {tuple(r.get("resourceNames", [])) for r in rules if r["verbs"] != ["create"]} == {(env[SECRET_ENV],), (config["metadata"]["name"],)}


def _webhook_certificate_triples() -> set[tuple[str, str, str]]:
    from specdeploy.controller.process.permissions import WEBHOOK_CERTIFICATE_PERMISSIONS

    return {(p.api_group, p.resource, v) for p in WEBHOOK_CERTIFICATE_PERMISSIONS for v in p.verbs}


def test_webhook_with_cert_manager(helm):
    objects = _webhook_objects(helm, "webhook.certManager.enabled=true", "webhook.failurePolicy=Fail")
    (config,) = by_kind(objects, "ValidatingWebhookConfiguration")
    (certificate,) = by_kind(objects, "Certificate")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{certificate['metadata']['name']}"
    assert "caBundle" not in config["webhooks"][0]["clientConfig"] and config["webhooks"][0]["failurePolicy"] == "Fail"
    assert by_kind(objects, "Issuer") and not [o for o in by_kind(objects, "Secret") if o.get("type") == "kubernetes.io/tls"]
    assert not [o for o in objects if o["metadata"]["name"].endswith(WEBHOOK_CERTIFICATE_RBAC)]  # cert-manager's job
    with_issuer = _webhook_objects(helm, "webhook.certManager.enabled=true", "webhook.certManager.issuerRef.kind=ClusterIssuer",
                                   "webhook.certManager.issuerRef.name=corp-ca")
    assert not by_kind(with_issuer, "Issuer")
    assert by_kind(with_issuer, "Certificate")[0]["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}



def test_webhook_network_policy_admits_the_webhook_port_only_from_the_given_peers(helm):
    """Opt-in: the operator's pods take the webhook port only from `from` (the API server's
    addresses), the metrics and health ports from `metricsFrom`; without `from` the chart refuses
    to render rather than open the port to everyone (a rule with no peers) or to no one."""
    values = CHART / "ci" / "webhook-values.yaml"
    chosen = values_of(values)["webhook"]["networkPolicy"]
    objects = render(helm, values)
    (policy,) = by_kind(objects, "NetworkPolicy")
    (deployment,) = by_kind(objects, "Deployment")
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    webhook_rule, metrics_rule = policy["spec"]["ingress"]
    assert webhook_rule == {"ports": [{"port": "webhook", "protocol": "TCP"}], "from": chosen["from"]}
    assert metrics_rule == {"ports": [{"port": "metrics", "protocol": "TCP"}, {"port": "health", "protocol": "TCP"}],
                            "from": chosen["metricsFrom"]}
    named = {p["name"] for p in _container(objects)["ports"]}
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == named == {"webhook", "metrics", "health"}

    peers = '[{"ipBlock": {"cidr": "192.0.2.10/32"}}]'
    (default_metrics,) = by_kind(render(helm, None, "--set", "webhook.enabled=true", "--set", "webhook.networkPolicy.enabled=true",
                                        "--set-json", f"webhook.networkPolicy.from={peers}"), "NetworkPolicy")
    assert default_metrics["spec"]["ingress"][0]["from"] == json.loads(peers)
    assert "from" not in default_metrics["spec"]["ingress"][1]  # metricsFrom empty: anyone, as without the policy
    assert not by_kind(render(helm), "NetworkPolicy") and not by_kind(_webhook_objects(helm), "NetworkPolicy")
    without_peers = _run_helm(helm, "template", RELEASE, str(CHART), "--set", "webhook.enabled=true", "--set", "webhook.networkPolicy.enabled=true")
    assert without_peers.returncode != 0 and "webhook.networkPolicy.from" in without_peers.stderr, without_peers.stderr


@pytest.mark.parametrize("values", VALUES_SETS, ids=VALUES_IDS)
def test_configmaps_are_read_only_in_the_watched_namespaces(helm, values):
    """With watchNamespaces, every grant on ConfigMaps is a Role in a watched namespace and no
    ClusterRole grants any: the operator cannot read another namespace's ConfigMaps, whatever
    it is asked. Cluster-wide, the one ClusterRole grants them."""
    objects = render(helm, values)
    watched = values_of(values)["watchNamespaces"]
    granting = [o for o in by_kind(objects, "Role") + by_kind(objects, "ClusterRole")
                if any("configmaps" in rule["resources"] for rule in o["rules"])]
    assert granting
    if watched:
        assert {o["kind"] for o in granting} == {"Role"}
        assert sorted(o["metadata"]["namespace"] for o in granting) == sorted(watched)
    else:
        assert [o["kind"] for o in granting] == ["ClusterRole"]


def test_one_replica_runs_without_leader_election_and_a_service_monitor_is_optional(helm):
    objects = render(helm, None, "--set", "replicas=1", "--set", "metrics.serviceMonitor.enabled=true", "--set", "logFormat=json")
    (dep,) = by_kind(objects, "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    env = {e["name"]: e.get("value") for e in _container(objects)["env"]}
    assert "SPECDEPLOY_LEADER_ELECTION" not in env and env["SPECDEPLOY_LOG_FORMAT"] == "json"
    assert not by_kind(objects, "PodDisruptionBudget")
    (monitor,) = by_kind(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    # The per-CR gauges' own namespace label is kept (not renamed exported_namespace).
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_the_reconcile_time_budget_reaches_the_operator(helm, monkeypatch):
    """The chart value is the env var the operator reads (30 s by default)."""
    from specdeploy.controller.reconcile.offload import BUDGET_ENV, reconcile_budget

    for extra, want in (((), 30.0), (("--set", "reconcileTimeBudgetSeconds=45"), 45.0)):
        env = {e["name"]: e.get("value") for e in _container(render(helm, None, *extra))["env"]}
        monkeypatch.setenv(BUDGET_ENV, env[BUDGET_ENV])
        assert reconcile_budget() == want


# Fields of the Prometheus Operator's PodMonitor (monitoring.coreos.com/v1) the chart may set:
# no schema for it is available offline, so the rendered object is held to these names.
POD_MONITOR_SPEC = {"selector", "namespaceSelector", "podMetricsEndpoints", "jobLabel", "podTargetLabels", "sampleLimit"}
POD_METRICS_ENDPOINT = {"port", "path", "interval", "scrapeTimeout", "scheme", "honorLabels", "relabelings"}


def _vllm_pod_template(namespace: str) -> dict:
    """The pod the operator renders for an example CR (the same code the operator runs)."""
    from specdeploy.stream import plan_stream

    text = (REPO_ROOT / "examples" / "llama-3.1-8b-eagle3.yaml").read_text()
    (result,) = plan_stream(text, "example", namespace=namespace).results
    (workload,) = [m for m in result.manifests if m["kind"] == "Deployment"]
    return workload["spec"]["template"]


@pytest.mark.parametrize("values", [None, CHART / "ci" / "namespaced-values.yaml"], ids=["cluster-wide", "namespaced"])
def test_an_optional_pod_monitor_scrapes_the_vllm_pods_the_operator_renders(helm, values):
    assert not by_kind(render(helm, values), "PodMonitor")  # off by default: the scrape annotations
    objects = render(helm, values, "--set", "metrics.vllmPodMonitor.enabled=true", "--set", "metrics.vllmPodMonitor.interval=15s",
                     "--set", "metrics.vllmPodMonitor.labels.release=prom")
    (monitor,) = by_kind(objects, "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["labels"]["release"] == "prom"
    spec = monitor["spec"]
    assert set(spec) <= POD_MONITOR_SPEC
    (endpoint,) = spec["podMetricsEndpoints"]
    assert set(endpoint) <= POD_METRICS_ENDPOINT and endpoint["interval"] == "15s" and endpoint["path"] == "/metrics"
    watched = values_of(values).get("watchNamespaces")
    assert spec["namespaceSelector"] == ({"matchNames": watched} if watched else {"any": True})
    # It selects the vLLM pod the operator renders, and names the port that pod serves /metrics on.
    pod = _vllm_pod_template(watched[0] if watched else "default")
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert endpoint["port"] in {p["name"] for p in container["ports"]}
    assert pod["metadata"]["annotations"]["prometheus.io/path"] == endpoint["path"]
    # Each series is labelled with the CR the pod serves (the dashboard's vLLM panels filter on it).
    assert spec["podTargetLabels"] == ["app.kubernetes.io/instance"]
    assert "app.kubernetes.io/instance" in pod["metadata"]["labels"]
    # ... and not the operator's own pods (those are the ServiceMonitor's).
    (operator,) = by_kind(objects, "Deployment")
    assert not spec["selector"]["matchLabels"].items() <= operator["spec"]["template"]["metadata"]["labels"].items()


# --- alerts and dashboard -------------------------------------------------------------------

RULES_FILE = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD_FILE = CHART / "files" / "grafana-dashboard.json"


def test_alerts_and_dashboard_are_opt_in(helm):
    objects = render(helm)
    assert not by_kind(objects, "PrometheusRule")
    assert not [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]


def test_the_prometheus_rule_is_the_rules_file_promtool_tests(helm):
    objects = render(helm, None, "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.labels.release=prom")
    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["apiVersion"] == PROMETHEUS_OPERATOR and rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"] == yaml.safe_load(RULES_FILE.read_text())


def test_the_dashboard_configmap_is_found_by_grafanas_sidecar(helm):
    values = CHART / "ci" / "observability-values.yaml"
    (dashboard,) = [o for o in by_kind(render(helm, values), "ConfigMap") if o["metadata"]["name"] == f"{RELEASE}-specdeploy-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "LLM serving"}
    (body,) = dashboard["data"].values()
    assert json.loads(body) == json.loads(DASHBOARD_FILE.read_text())
    moved = render(helm, None, "--set", "metrics.grafanaDashboard.enabled=true", "--set-json",
                   'metrics.grafanaDashboard.labels={"dashboards": "llm"}')
    (dashboard,) = [o for o in by_kind(moved, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]
    assert dashboard["metadata"]["namespace"] == NAMESPACE and dashboard["metadata"]["labels"]["dashboards"] == "llm"
