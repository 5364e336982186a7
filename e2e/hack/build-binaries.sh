#!/usr/bin/env bash
# Builds the real control-plane binaries the e2e suite runs (kube-apiserver,
# kube-controller-manager, kube-scheduler, etcd, kwok) and the real node's kubelet from the Go
# module proxy and caches them
# outside the repo, keyed by version, so only the first run on a machine pays the cold build.
# Prints the bin directory on its last line.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
BIN=$CACHE/e2e-bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION
mkdir -p "$BIN"

log() { echo "[build-binaries] $*" >&2; }
# timed NAME CMD...: runs CMD and logs how long it took (the cold build is the slow part of CI).
timed() {
  local name=$1 start=$SECONDS; shift
  "$@"
  log "$name ready in $((SECONDS - start))s"
}

build_k8s() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet) missing=0
  for b in "${want[@]}"; do [ -x "$BIN/$b" ] || missing=1; done
  [ $missing = 0 ] && return
  local work=$CACHE/src/k8s-$K8S_VERSION
  mkdir -p "$work"
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local staging_version="v0.${K8S_VERSION#v1.}"
  cd "$work"
  if [ ! -f go.mod ]; then
    cat > go.mod <<GOMOD
module gpupolicy.dev/e2e/k8sbuild

go 1.25

require k8s.io/kubernetes $K8S_VERSION
GOMOD
    # Every staging module of k8s.io/kubernetes is required at v0.0.0 and replaced by a
    # local path upstream; outside the tree each must point at its published v0.x tag.
    local modfile
    modfile=$(GOFLAGS=-mod=mod go mod download -json k8s.io/kubernetes@$K8S_VERSION | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$modfile" | awk '{print $1}' | sort -u | while read -r m; do
      echo "replace $m => $m $staging_version" >> go.mod
    done
    echo "package main" > tools.go
    GOFLAGS=-mod=mod go get k8s.io/kubernetes@$K8S_VERSION >&2
  fi
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  for b in "${want[@]}"; do
    [ -x "$BIN/$b" ] && continue
    log "building $b $K8S_VERSION (cold: several minutes)"
    GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$BIN/$b.tmp" k8s.io/kubernetes/cmd/$b >&2
    mv "$BIN/$b.tmp" "$BIN/$b"
  done
}

# go_build_in_wrapper MODULE VERSION PKG OUT: modules whose go.mod has replace directives
# cannot be `go install`ed; a throwaway main module that requires them builds them as-is.
go_build_in_wrapper() {
  local mod=$1 ver=$2 pkg=$3 out=$4
  local work=$CACHE/src/$(echo "$mod" | tr '/' '_')-$ver
  mkdir -p "$work"
  ( cd "$work"
    [ -f go.mod ] || printf 'module gpupolicy.dev/e2e/wrapper\n\ngo 1.25\n' > go.mod
    GOFLAGS=-mod=mod go get "$pkg@$ver" >&2
    GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out.tmp" "$pkg" >&2 )
  mv "$out.tmp" "$out"
}

build_etcd() {
  [ -x "$BIN/etcd" ] && return
  log "building etcd $ETCD_VERSION"
  go_build_in_wrapper go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3 "$BIN/etcd"
}

build_kwok() {
  [ -x "$BIN/kwok" ] && return
  log "building kwok $KWOK_VERSION"
  go_build_in_wrapper sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok "$BIN/kwok"
  # kwok needs stage configs; its module ships them.
  local dir
  dir=$(cd "$CACHE/src/sigs.k8s.io_kwok-$KWOK_VERSION" && go list -m -json sigs.k8s.io/kwok | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$BIN/kwok-stages"; mkdir -p "$BIN/kwok-stages"
  cp -r "$dir/kustomize/stage/." "$BIN/kwok-stages/"
  chmod -R u+w "$BIN/kwok-stages"
}

timed etcd build_etcd
timed kwok build_kwok
timed "kube-apiserver, kube-controller-manager, kube-scheduler, kubelet" build_k8s
echo "$BIN"
