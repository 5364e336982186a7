#!/usr/bin/env bash
# Runs the end-to-end suite on a real control plane. Builds what it needs first: bin/gpupolicy-fn
# and kustomize (make build tools), the image bin/gpupolicy-image.tar (make image, cached bases
# under ~/.cache/gpupolicy/images; a failed build fails the suite), and the control-plane
# binaries (hack/build-binaries.sh; cached under ~/.cache/gpupolicy/e2e-bin, the cold build
# takes ~15 min on two cores), the GitOps engines (hack/build-gitops.sh, ~6.5 min cold), NVIDIA's
# GPU Operator (hack/build-operator.sh, ~2 min cold) and helm (make helm, ~1.5 min cold).
# Extra arguments go to `go test` (e.g. -run TestGuardrails). Prints the total duration.
set -uo pipefail
start=$(date +%s)
root=$(cd "$(dirname "$0")/.." && pwd)
export CGO_CFLAGS=${CGO_CFLAGS:-"-O2 -g -Wno-deprecated-declarations"}

finish() {
  local rc=$1 took=$(( $(date +%s) - start ))
  printf 'e2e: %s in %dm%02ds\n' "$([ "$rc" = 0 ] && echo PASS || echo FAIL)" $((took / 60)) $((took % 60))
  exit "$rc"
}

cd "$root" || finish 1
make -s build tools image helm || finish $?
bin_dir=$(bash e2e/hack/build-binaries.sh | tail -n 1) || finish $?
echo "e2e: control-plane binaries in $bin_dir"
# The real GitOps engines of TestFleet* (kustomize-controller, argo-sync), cached under
# ~/.cache/gpupolicy/gitops-bin; the cold build takes ~6.5 min on two cores.
gitops_dir=$(bash e2e/hack/build-gitops.sh | tail -n 1) || finish $?
echo "e2e: GitOps engines in $gitops_dir"
# NVIDIA's GPU Operator for TestTakeOverFromGPUOperator (hack/build-operator.sh), cached under
# ~/.cache/gpupolicy/peers; the cold build takes about 2 min on two cores.
operator_dir=$(bash e2e/hack/build-operator.sh | tail -n 1) || finish $?
echo "e2e: gpu-operator in $operator_dir"
observers_dir=$(bash e2e/hack/build-nfd-ksm.sh | tail -n 1) || finish $?
echo "e2e: nfd-master and kube-state-metrics in $observers_dir"
# The fleet delivery peers of TestFleetOCI and TestFleetApplicationSet (hack/build-fleet-peers.sh:
# the distribution registry, source-controller, Argo CD's ApplicationSet controller).
fleet_dir=$(bash e2e/hack/build-fleet-peers.sh | tail -n 1) || finish $?
echo "e2e: registry, source-controller and ApplicationSet controller in $fleet_dir"
cd e2e || finish 1
# -p 1: each package (the main suite, e2e/realnode, e2e/image) starts its own control plane
# or real node; run one at a time so they never compete for ports, the kubelet directory, CPU.
go test -p 1 ./... -v -count=1 -timeout 40m "$@"
finish $?
