#!/usr/bin/env bash
# Builds the two observers the discovery-and-alerts e2e test runs out of cluster against its
# control plane, and caches them outside the repo keyed by version:
#   - Node Feature Discovery's nfd-master (sigs.k8s.io/node-feature-discovery), with NFD's CRDs;
#     the module's api/nfd is a nested module its go.mod replaces with ./api/nfd, which the
#     module zip leaves out, so the served api/nfd module of the same version is put there;
#   - kube-state-metrics (k8s.io/kube-state-metrics/v2).
# Each is built in its own module directory with its own go.sum (their k8s.io versions differ
# from each other's and the project's, so there is no Kubernetes to share). Prints the output
# directory on its last line.
set -euo pipefail

NFD_VERSION=${NFD_VERSION:-v0.17.3}
KSM_VERSION=${KSM_VERSION:-v2.20.0}
CACHE=${GPUPOLICY_CACHE:-$HOME/.cache/gpupolicy}
OUT=$CACHE/peers/nfd-$NFD_VERSION-ksm-$KSM_VERSION

log() { echo "[build-nfd-ksm] $*" >&2; }

if [ -x "$OUT/nfd-master" ] && [ -x "$OUT/kube-state-metrics" ] && [ -f "$OUT/crds/nfd-api-crds.yaml" ]; then
  echo "$OUT"; exit 0
fi
start=$SECONDS
mkdir -p "$CACHE"
dir_of() { (cd "$CACHE" && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'); }
tmp=$OUT.tmp
rm -rf "$tmp"; mkdir -p "$tmp/crds" "$tmp/src"

log "building nfd-master $NFD_VERSION (cold: about 3 minutes on two cores)"
nfd=$(dir_of "sigs.k8s.io/node-feature-discovery@$NFD_VERSION")
api=$(dir_of "sigs.k8s.io/node-feature-discovery/api/nfd@$NFD_VERSION")
cp -r "$nfd" "$tmp/src/nfd"; chmod -R u+w "$tmp/src/nfd"
rm -rf "$tmp/src/nfd/api/nfd"; mkdir -p "$tmp/src/nfd/api"
cp -r "$api" "$tmp/src/nfd/api/nfd"; chmod -R u+w "$tmp/src/nfd/api/nfd"
( cd "$tmp/src/nfd" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$tmp/nfd-master" ./cmd/nfd-master >&2 )
cp "$nfd/deployment/base/nfd-crds/nfd-api-crds.yaml" "$tmp/crds/"

log "building kube-state-metrics $KSM_VERSION (cold: about 3 minutes on two cores)"
ksm=$(dir_of "k8s.io/kube-state-metrics/v2@$KSM_VERSION")
( cd "$ksm" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$tmp/kube-state-metrics" . >&2 )

rm -rf "$tmp/src"
chmod -R u+w "$tmp"
rm -rf "$OUT"; mv "$tmp" "$OUT"
log "nfd-master and kube-state-metrics ready in $((SECONDS - start))s"
echo "$OUT"
