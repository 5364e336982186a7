#!/usr/bin/env bash
# Builds the real GitOps engines the fleet e2e tests run and caches them outside the repo, keyed
# by version, so only the first run on a machine pays the cold build:
#   - Flux's kustomize-controller (with the kustomize-controller and source-controller CRDs it
#     needs; source-controller itself is not needed: the tests serve the artifact themselves),
#   - argo-sync, a small program over Argo's gitops-engine pkg/sync (e2e/hack/argo-sync).
# Each lives in its own module so their k8s.io versions stay out of the project's modules.
# Prints the bin directory's parent on its last line.
set -euo pipefail

FLUX_VERSION=${FLUX_KUSTOMIZE_CONTROLLER_VERSION:-v1.9.6}
SOURCE_VERSION=${FLUX_SOURCE_CONTROLLER_VERSION:-v1.9.6}
GITOPS_ENGINE_VERSION=${GITOPS_ENGINE_VERSION:-v0.7.3}
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
ROOT=$CACHE/gitops-bin
here=$(cd "$(dirname "$0")" && pwd)

NAME=build-gitops
# shellcheck source=lib.sh
source "$here/lib.sh"

build_flux() {
  local out=$ROOT/kustomize-controller-$FLUX_VERSION
  [ -x "$out/kustomize-controller" ] && [ -d "$out/crds" ] && return
  log "building kustomize-controller $FLUX_VERSION (cold: several minutes)"
  local work
  work=$(workcopy "kustomize-controller-$FLUX_VERSION" github.com/fluxcd/kustomize-controller "$FLUX_VERSION")
  # The module zip lacks ./api; use the published api module of the same version instead.
  ( cd "$work"
    go mod edit -dropreplace github.com/fluxcd/kustomize-controller/api
    GOFLAGS=-mod=mod go get "github.com/fluxcd/kustomize-controller/api@$FLUX_VERSION" >&2
    GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$work/kustomize-controller.tmp" . >&2 )
  mkdir -p "$out/crds"
  mv "$work/kustomize-controller.tmp" "$out/kustomize-controller"
  cp "$work/config/crd/bases/"*.yaml "$out/crds/"
  local ssrc
  ssrc=$(cd "$CACHE" && moddir github.com/fluxcd/source-controller "$SOURCE_VERSION")
  cp "$ssrc/config/crd/bases/"*.yaml "$out/crds/"
  chmod -R u+w "$out/crds"
}

build_argo() {
  local out=$ROOT/argo-sync-gitops-engine-$GITOPS_ENGINE_VERSION
  # The program's own source is part of the key: a changed main.go rebuilds it.
  local sum
  sum=$(cat "$here/argo-sync/go.mod" "$here/argo-sync/"*.go | sha256sum | cut -c1-12)
  [ -x "$out/argo-sync-$sum" ] && { ln -sf "argo-sync-$sum" "$out/argo-sync"; return; }
  log "building argo-sync on gitops-engine $GITOPS_ENGINE_VERSION (cold: a few minutes)"
  mkdir -p "$out"
  ( cd "$here/argo-sync"
    GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out/argo-sync-$sum.tmp" . >&2 )
  mv "$out/argo-sync-$sum.tmp" "$out/argo-sync-$sum"
  ln -sf "argo-sync-$sum" "$out/argo-sync"
}

timed kustomize-controller build_flux
timed argo-sync build_argo
echo "$ROOT"
