"""Every Kubernetes permission the operator's code uses, declared once.

The Helm chart builds its (Cluster)Role from `PERMISSIONS`, and the client layer
(`controller/process/kube.py`) checks each call against it, so the RBAC the chart grants and the
calls the code makes cannot drift apart. `SECRETS_PERMISSION` is opt-in: only an operator
that reads a Hub token itself (to fetch configs from gated repos) needs it; the pods get
their token through `secretKeyRef`, which needs no operator permission.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Permission:
    """One RBAC rule: `resource` may carry a subresource (`speculativedeployments/status`)."""

    api_group: str
    resource: str
    verbs: tuple[str, ...]


PERMISSIONS: tuple[Permission, ...] = (
    # The custom resource: kopf lists and watches it, patches its progress annotations
    # and, through the status subresource, the designed status (read with the object itself).
    Permission("specdeploy.io", "speculativedeployments", ("get", "list", "watch", "patch")),
    Permission("specdeploy.io", "speculativedeployments/status", ("patch",)),
    # The children. list/watch: a watch handler mirrors the workloads' readiness into the
    # parent's status and puts back a hand-edited or deleted child (no timer, hence no
    # finalizer on the parent). delete: children we own and no longer render are pruned
    # (a Deployment after a switch to a LeaderWorkerSet), only with our ownerReference.
    Permission("apps", "deployments", ("get", "list", "watch", "create", "patch", "delete")),
    Permission("leaderworkerset.x-k8s.io", "leaderworkersets", ("get", "list", "watch", "create", "patch", "delete")),
    Permission("", "services", ("get", "list", "watch", "create", "patch", "delete")),
    Permission("policy", "poddisruptionbudgets", ("get", "list", "watch", "create", "patch", "delete")),
    # spec.routing's InferencePool (Gateway API Inference Extension), a child like the others.
    Permission("inference.networking.k8s.io", "inferencepools", ("get", "list", "watch", "create", "patch", "delete")),
    # Model configs given as spec.target.configMapRef / spec.draft.configMapRef (get); the
    # preflight's ConfigMap (the judge, its request and the configs read), deleted once judged.
    Permission("", "configmaps", ("get", "create", "delete")),
    # The preflight Job (controller/reconcile/preflight_gate.py): started once per image + args + configs, read
    # when it changes (list/watch, with a server-side selector on our label: no polling); its
    # TTL removes it. delete: a Job whose judge was edited, whose pod cannot be told from a copy,
    # or that runs another template than the operator's, is made again.
    Permission("batch", "jobs", ("get", "list", "watch", "create", "delete")),
    # Leader election (two replicas, one active): the Lease in the operator's namespace.
    # The renewal is a merge patch carrying the resourceVersion it read (controller/process/leader.py).
    Permission("coordination.k8s.io", "leases", ("get", "create", "patch")),
    # The serving pods: the telemetry lists them for each ready leader pod's IP and reads its
    # /metrics there, and the preflight pod for its termination message (never one pod by name).
    # It reads only the pods its workload owns, through the owner chain: a Deployment's
    # ReplicaSets, a LeaderWorkerSet's leader StatefulSet (controller/scraping/scrape.py). Watched, with a
    # server-side selector on its own label, for the scheduler's verdict (Ready=Unschedulable) and
    # for the preflight pod's end (the CR waiting on its Job is reconciled then).
    Permission("", "pods", ("list", "watch")),
    Permission("apps", "replicasets", ("list",)),
    Permission("apps", "statefulsets", ("list",)),
    # Events for warnings and meaningful condition transitions (kopf posts them to core/v1 events).
    Permission("", "events", ("create",)),
)

# Opt-in (chart value): read the Secret named by spec.hfTokenSecretRef to fetch configs of
# gated Hub repos. Without it the operator reads configs anonymously, inline or from ConfigMaps.
SECRETS_PERMISSION = Permission("", "secrets", ("get",))


# When the operator keeps the webhook's certificate (the chart without cert-manager,
# controller/admission/certificates.py): its Secret in the release namespace and the caBundle of its
# ValidatingWebhookConfiguration. The chart narrows get/patch (and the Secret's watch, a
# watch on its name alone) to those names.
WEBHOOK_CERTIFICATE_PERMISSIONS: tuple[Permission, ...] = (
    Permission("", "secrets", ("get", "watch", "create", "patch")),
    Permission("admissionregistration.k8s.io", "validatingwebhookconfigurations", ("get", "patch")),
)


def allows(api_group: str, resource: str, verb: str, *, with_secrets: bool = True, with_webhook_certificate: bool = False) -> bool:
    """True when the declared permissions cover this call (used by the client layer)."""
    rules = (PERMISSIONS + ((SECRETS_PERMISSION,) if with_secrets else ())
             + (WEBHOOK_CERTIFICATE_PERMISSIONS if with_webhook_certificate else ()))
    return any(p.api_group == api_group and p.resource == resource and verb in p.verbs for p in rules)
