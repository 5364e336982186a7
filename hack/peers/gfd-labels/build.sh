#!/usr/bin/env bash
# Builds gfd-labels (main.go beside this script): gpu-feature-discovery's own labelers, from a
# copy of NVIDIA's k8s-device-plugin (their internal/ packages can be imported only from inside
# that module), run over this checkout's NVML mock. It is the peer of the agent's labels in the
# differential test plugin/agent/cli/gfd_test.go.
#
# The copy is prepared once per version under $CACHE/src. The program itself is rebuilt on every
# call, because it links this checkout's mock (plugin/gpulib/gpumock); Go's build cache keeps
# that to seconds. Usage: build.sh [OUT] (default $CACHE/peers/gfd-$VERSION/gfd-labels).
#
# Changes to NVIDIA's module, each forced by what the module proxy serves or by the mock:
#   - vendor/ is dropped (a module zip keeps only vendor/modules.txt); modules come from the proxy.
#   - sigs.k8s.io/node-feature-discovery v0.15.7 (the proxy refuses it) is replaced by v0.15.4:
#     GFD uses it only to publish NodeFeature objects, which gfd-labels does not do.
#   - github.com/NVIDIA/go-nvlib v0.7.4 becomes v0.12.0 (the version nvidia-container-toolkit
#     v1.20.2 ships): the mock's go-nvml v0.13 dropped a constant v0.7.4 refers to.
set -euo pipefail

VERSION=${GFD_VERSION:-v0.17.4}
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
src=$CACHE/src/k8s-device-plugin-$VERSION
out=${1:-$CACHE/peers/gfd-$VERSION/gfd-labels}

log() { echo "[gfd-labels] $*" >&2; }

if [ ! -f "$src/.prepared" ]; then
  log "preparing a copy of k8s-device-plugin $VERSION in $src (first run only)"
  mkdir -p "$CACHE/src"
  dir=$(cd "$CACHE" && GOFLAGS=-mod=mod go mod download -json "github.com/NVIDIA/k8s-device-plugin@$VERSION" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$src.tmp"; mkdir -p "$src.tmp"
  cp -r "$dir/." "$src.tmp/"; chmod -R u+w "$src.tmp"; rm -rf "$src.tmp/vendor"
  ( cd "$src.tmp"
    go mod edit -require=github.com/gpupolicy/gpupolicy@v0.0.0 -require=github.com/NVIDIA/go-nvlib@v0.12.0 \
      -replace=sigs.k8s.io/node-feature-discovery=sigs.k8s.io/node-feature-discovery@v0.15.4 )
  touch "$src.tmp/.prepared"
  rm -rf "$src"; mv "$src.tmp" "$src"
fi

mkdir -p "$src/cmd/gfd-labels" "$(dirname "$out")"
cp "$here/main.go" "$src/cmd/gfd-labels/main.go"
( cd "$src"
  go mod edit -replace="github.com/gpupolicy/gpupolicy=$repo"
  GOFLAGS=-mod=mod go mod tidy >&2
  CGO_ENABLED=1 go build -tags gfdharness -o "$out.tmp" ./cmd/gfd-labels >&2 )
mv "$out.tmp" "$out"
