#!/usr/bin/env bash
# Build a developer tool from the Go module proxy, pinned by its wrapper module beside this
# script (hack/tools/NAME/go.mod, go.sum), and print the directory that holds it.
# `build.sh promtool`: Prometheus' promtool, which `make test` runs on the chart's alert rules.
#
# Cached outside the clone like hack/cluster/build.sh, keyed by the wrapper's go.mod/go.sum, the
# Go version and this script; GOCACHE/GOMODCACHE are Go's own caches. A lock serialises builds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SPECDEPLOY_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdeploy-tools}"
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
declare -A packages=([promtool]=github.com/prometheus/prometheus/cmd/promtool)
declare -A modules=([promtool]=github.com/prometheus/prometheus)
name="${1:?usage: build.sh promtool}"
package="${packages[$name]:?no such tool: $name}"
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9
dir="$cache/$name-$( (go version; cat "$0" "$here/$name/go.mod" "$here/$name/go.sum") | sha256sum | cut -c1-16)"
if [ ! -f "$dir/.complete" ]; then
  echo "==> building $package (module hack/tools/$name; a few minutes the first time)" >&2
  out="$dir.tmp"; rm -rf "$out"; mkdir -p "$out"
  # Stamped with the pinned version (`promtool --version`), which a module build leaves empty.
  version="$(cd "$here/$name" && go list -m -f '{{.Version}}' "${modules[$name]}")"
  (cd "$here/$name" && go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" -o "$out/" "$package")
  touch "$out/.complete"; rm -rf "$dir"; mv "$out" "$dir"
fi
echo "$dir"
