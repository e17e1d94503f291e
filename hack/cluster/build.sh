#!/usr/bin/env bash
# Build the real control plane's binaries from the Go module proxy, pinned by the wrapper
# modules beside this script (one per upstream project, so none can move another's
# dependencies). Prints the directory that holds them.
#
# The binaries are cached outside the clone, keyed by every wrapper's go.mod/go.sum, the Go
# version and this script (which holds the ldflags); GOCACHE/GOMODCACHE are Go's own caches.
# A lock serialises concurrent builds (two `make test` on one machine).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SPECDEPLOY_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdeploy-cluster}"
K8S_VERSION=v1.36.3
key="$( (go version; cat "$0" "$here"/*/go.mod "$here"/*/go.sum) | sha256sum | cut -c1-16)"
bin="$cache/bin-$key"
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9
if [ -f "$bin/.complete" ]; then echo "$bin"; exit 0; fi
rm -rf "$bin.tmp"; mkdir -p "$bin.tmp"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
log() { echo "==> $*" >&2; }
version_flags() {  # -X flags stamping a release into k8s.io/component-base and client-go
  local major minor; major="${1#v}"; major="${major%%.*}"; minor="$(echo "$1" | cut -d. -f2)"
  local v=k8s.io/component-base/version c=k8s.io/client-go/pkg/version
  echo "-X $v.gitVersion=$1 -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
       "-X $c.gitVersion=$1 -X $c.gitMajor=$major -X $c.gitMinor=$minor -X $c.gitTreeState=clean"
}
build() {  # build DIR LDFLAGS PACKAGE... : `go build` inside wrapper module DIR
  local dir="$1" flags="$2"; shift 2
  log "building $* (module hack/cluster/$dir)"
  local start=$SECONDS
  (cd "$here/$dir" && go build -trimpath -ldflags "-s -w $flags" -o "$bin.tmp/" "$@")
  log "built $dir in $((SECONDS - start)) s"
}
# All four in one `go build` so their shared packages compile once.
build k8s "$(version_flags $K8S_VERSION)" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
build etcd "" go.etcd.io/etcd/server/v3
mv "$bin.tmp/server" "$bin.tmp/etcd"
build kwok "" sigs.k8s.io/kwok/cmd/kwok
# kwok's own node and pod stages, from the same module version
cp -r "$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage" "$bin.tmp/kwok-stages"
chmod -R u+w "$bin.tmp/kwok-stages"
build helm "-X helm.sh/helm/v4/internal/version.version=v4.3.2 $(version_flags $K8S_VERSION)" helm.sh/helm/v4/cmd/helm
build lws "" sigs.k8s.io/lws/cmd
mv "$bin.tmp/cmd" "$bin.tmp/lws-controller"
# LWS's CRDs and webhook configurations, from the same module version
lws_dir="$(cd "$here/lws" && go list -m -f '{{.Dir}}' sigs.k8s.io/lws)"
mkdir -p "$bin.tmp/lws-config/crd" "$bin.tmp/lws-config/webhook"
cp "$lws_dir"/config/crd/bases/*.yaml "$bin.tmp/lws-config/crd/"
cp "$lws_dir/config/webhook/manifests.yaml" "$bin.tmp/lws-config/webhook/"
chmod -R u+w "$bin.tmp/lws-config"
touch "$bin.tmp/.complete"
rm -rf "$bin"; mv "$bin.tmp" "$bin"
echo "$bin"
