#!/usr/bin/env bash
# Builds NVIDIA's GPU Operator (the controller manager, ./cmd/gpu-operator) that the takeover
# e2e test runs out of cluster, and caches it outside the repo keyed by version, with the trees
# it reads at run time (assets/, manifests/ as /opt/gpu-operator), its CRDs and its Helm chart. The version is
# the one the project's go.mod pins for the imported API types, so `import` and the operator
# under test agree. Its own module: its k8s.io versions stay out of the project's modules.
# Prints the output directory on its last line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
VERSION=${GPU_OPERATOR_VERSION:-$(cd "$here/../.." && go list -m -f '{{.Version}}' github.com/NVIDIA/gpu-operator)}
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
OUT=$CACHE/peers/gpu-operator-$VERSION

log() { echo "[build-operator] $*" >&2; }

if [ -x "$OUT/gpu-operator" ] && [ -d "$OUT/opt/gpu-operator/state-driver" ] && [ -d "$OUT/crds" ] && [ -f "$OUT/chart/Chart.yaml" ]; then
  echo "$OUT"; exit 0
fi
start=$SECONDS
log "building gpu-operator $VERSION (cold: about 2 minutes on two cores)"
src=$(cd "$CACHE" 2>/dev/null || mkdir -p "$CACHE" && cd "$CACHE"; \
  GOFLAGS=-mod=mod go mod download -json "github.com/NVIDIA/gpu-operator@$VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
tmp=$OUT.tmp
rm -rf "$tmp"; mkdir -p "$tmp/opt/gpu-operator" "$tmp/crds"
# Built in the module's own directory: its go.mod and go.sum pin every dependency.
( cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$tmp/gpu-operator" ./cmd/gpu-operator >&2 )
cp -r "$src/assets/." "$tmp/opt/gpu-operator/"
cp -r "$src/manifests" "$tmp/opt/gpu-operator/manifests"
cp "$src/deployments/gpu-operator/crds/"*.yaml "$tmp/crds/"
cp -r "$src/deployments/gpu-operator" "$tmp/chart"
chmod -R u+w "$tmp"
rm -rf "$OUT"; mv "$tmp" "$OUT"
log "gpu-operator ready in $((SECONDS - start))s"
echo "$OUT"
