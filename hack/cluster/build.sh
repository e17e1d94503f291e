#!/usr/bin/env bash
# Build the real control plane's binaries from the Go module proxy, pinned by the wrapper
# modules beside this script (one per upstream project, so none can move another's
# dependencies). Prints the directory that holds them.
#
# `build.sh helm` builds only helm (the chart tests need it, not the cluster) and prints the
# directory that holds it; the full build takes its helm from there, so there is one helm.
#
# The binaries are cached outside the clone, keyed by every wrapper's go.mod/go.sum, the Go
# version and this script (which holds the ldflags); GOCACHE/GOMODCACHE are Go's own caches.
# A lock serialises concurrent builds (two `make test` on one machine).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SPECDEPLOY_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdeploy-cluster}"
K8S_VERSION=v1.36.3
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9
log() { echo "==> $*" >&2; }
version_flags() {  # -X flags stamping a release into k8s.io/component-base and client-go
  local major minor; major="${1#v}"; major="${major%%.*}"; minor="$(echo "$1" | cut -d. -f2)"
  local v=k8s.io/component-base/version c=k8s.io/client-go/pkg/version
  echo "-X $v.gitVersion=$1 -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
       "-X $c.gitVersion=$1 -X $c.gitMajor=$major -X $c.gitMinor=$minor -X $c.gitTreeState=clean"
}
build() {  # build DIR LDFLAGS PACKAGE... : `go build` inside wrapper module DIR, into $out
  local dir="$1" flags="$2"; shift 2
  log "building $* (module hack/cluster/$dir)"
  local start=$SECONDS
  (cd "$here/$dir" && go build -trimpath -ldflags "-s -w $flags" -o "$out/" "$@")
  log "built $dir in $((SECONDS - start)) s"
}
cached() {  # cached NAME FILES... : the cache directory keyed by the Go version, this script and FILES
  echo "$cache/$1-$( (go version; cat "$0" "${@:2}") | sha256sum | cut -c1-16)"
}
build_helm() {  # helm alone, stamped with the version its wrapper module pins
  local version; version="$(cd "$here/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v4)"
  build helm "-X helm.sh/helm/v4/internal/version.version=$version $(version_flags $K8S_VERSION)" helm.sh/helm/v4/cmd/helm
}
helm_dir="$(cached helm "$here"/helm/go.mod "$here"/helm/go.sum)"
if [ ! -f "$helm_dir/.complete" ]; then
  out="$helm_dir.tmp"; rm -rf "$out"; mkdir -p "$out"
  build_helm
  touch "$out/.complete"; rm -rf "$helm_dir"; mv "$out" "$helm_dir"
fi
if [ "${1:-}" = helm ]; then echo "$helm_dir"; exit 0; fi
bin="$(cached bin "$here"/*/go.mod "$here"/*/go.sum)"
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi
out="$bin.tmp"; rm -rf "$out"; mkdir -p "$out"
# All four in one `go build` so their shared packages compile once.
build k8s "$(version_flags $K8S_VERSION)" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
build etcd "" go.etcd.io/etcd/server/v3
mv "$out/server" "$out/etcd"
build kwok "" sigs.k8s.io/kwok/cmd/kwok
# kwok's own node and pod stages, from the same module version
cp -r "$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage" "$out/kwok-stages"
chmod -R u+w "$out/kwok-stages"
cp "$helm_dir/helm" "$out/helm"
build lws "" sigs.k8s.io/lws/cmd
mv "$out/cmd" "$out/lws-controller"
# LWS's CRDs and webhook configurations, from the same module version
lws_dir="$(cd "$here/lws" && go list -m -f '{{.Dir}}' sigs.k8s.io/lws)"
mkdir -p "$out/lws-config/crd" "$out/lws-config/webhook"
cp "$lws_dir"/config/crd/bases/*.yaml "$out/lws-config/crd/"
cp "$lws_dir/config/webhook/manifests.yaml" "$out/lws-config/webhook/"
chmod -R u+w "$out/lws-config"
# The Gateway API Inference Extension's InferencePool CRD (spec.routing renders an InferencePool),
# from the module version hack/cluster/inference pins: a CRD only, nothing to build.
inference_dir="$(cd "$here/inference" && go mod download sigs.k8s.io/gateway-api-inference-extension &&
                 go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api-inference-extension)"
mkdir -p "$out/inference-crd"
cp "$inference_dir/config/crd/bases/inference.networking.k8s.io_inferencepools.yaml" "$out/inference-crd/"
chmod -R u+w "$out/inference-crd"
touch "$out/.complete"
rm -rf "$bin"; mv "$out" "$bin"
echo "$bin"
