#!/usr/bin/env bash
# Builds gfd-labels (main.go beside this script): gpu-feature-discovery's own labelers, from a
# copy of NVIDIA's k8s-device-plugin (their internal/ packages can be imported only from inside
# that module), run over this checkout's NVML mock. It is the peer of the agent's labels in the
# differential test plugin/agent/cli/gfd_test.go. Beside it, dp-allocate (dp-allocate/main.go):
# the same module's device plugin servers answering Allocate, the peer of
# plugin/deviceplugin/nvidia_test.go.
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
#   - tags.cncf.io/container-device-interface stays at NVIDIA's v0.8.1 (specs-go v0.8.0) and
#     github.com/opencontainers/runtime-spec at its v1.2.1 (runtime-tools needs it) and
#     k8s.io/kubelet at its v0.31.3 (its device plugin API is the gogo-protobuf one), which
#     gpupolicy's own requirement of v1.1 would otherwise raise.
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

mkdir -p "$src/cmd/gfd-labels" "$src/cmd/dp-allocate" "$(dirname "$out")"
cp "$here/main.go" "$src/cmd/gfd-labels/main.go"
cp "$here/dp-allocate/main.go" "$src/cmd/dp-allocate/main.go"
( cd "$src"
  # gpupolicy's module asks for CDI v1.1; NVIDIA's internal/cdi (dp-allocate links it) builds
  # against the v0.8 it ships with. The mock gpupolicy lends the peers imports no CDI.
  go mod edit -replace="github.com/gpupolicy/gpupolicy=$repo" \
    -replace=tags.cncf.io/container-device-interface=tags.cncf.io/container-device-interface@v0.8.1 \
    -replace=tags.cncf.io/container-device-interface/specs-go=tags.cncf.io/container-device-interface/specs-go@v0.8.0 \
    -replace=github.com/opencontainers/runtime-spec=github.com/opencontainers/runtime-spec@v1.2.1 \
    -replace=k8s.io/kubelet=k8s.io/kubelet@v0.31.3
  GOFLAGS=-mod=mod go mod tidy >&2
  CGO_ENABLED=1 go build -tags gfdharness -o "$out.tmp" ./cmd/gfd-labels >&2
  CGO_ENABLED=1 go build -tags gfdharness -o "$(dirname "$out")/dp-allocate.tmp" ./cmd/dp-allocate >&2 )
mv "$out.tmp" "$out"
mv "$(dirname "$out")/dp-allocate.tmp" "$(dirname "$out")/dp-allocate"
