#!/usr/bin/env bash
# pin-image.sh IMAGE@sha256:DIGEST POLICY OUT_DIR: the release workflow's pinning step (release.yaml),
# a script so examples/github_actions_test.go runs it. It writes POLICY with
# spec.images.gpupolicy set to the image by digest into OUT_DIR/gpupolicy.yaml, renders it into
# OUT_DIR/rendered with gpupolicy-fn, and fails unless every container that runs the
# gpupolicy image in the rendered tree runs exactly that reference (a tag left anywhere would
# let nodes pull a different build than the one released).
#
# Needs yq v4 (github.com/mikefarah/yq; preinstalled on GitHub's ubuntu runners) and
# gpupolicy-fn (GPUPOLICY_FN, default: on PATH).
set -euo pipefail

if [ $# -ne 3 ]; then
	echo "usage: $0 IMAGE@sha256:DIGEST POLICY OUT_DIR" >&2
	exit 2
fi
ref=$1 policy=$2 out=$3
fn=${GPUPOLICY_FN:-gpupolicy-fn}
case "$ref" in
*@sha256:*) ;;
*)
	echo "pin-image.sh: $ref is not IMAGE@sha256:DIGEST: pass the digest the image push printed" >&2
	exit 2
	;;
esac

mkdir -p "$out"
cp "$policy" "$out/gpupolicy.yaml"
IMAGE=$ref yq -i '.spec.images.gpupolicy = strenv(IMAGE)' "$out/gpupolicy.yaml"
# render validates the reference (spec.images.gpupolicy: sha256:<64 lower-case hex>).
"$fn" render -f "$out/gpupolicy.yaml" -o "$out/rendered" >&2

repo=${ref%@*}
# Every image line naming this repository must be the pinned reference.
bad=$(grep -rhoE "image: *\"?[^\" ]*${repo##*/}[^\" ]*" "$out/rendered" | sed -E 's/image: *"?//' | sort -u | grep -vxF "$ref" || true)
if [ -n "$bad" ]; then
	echo "pin-image.sh: the rendered tree still runs: $bad (want $ref everywhere)" >&2
	exit 1
fi
count=$(grep -rhoF "image: $ref" "$out/rendered" | wc -l)
if [ "$count" -eq 0 ]; then
	echo "pin-image.sh: no container in $out/rendered runs $ref" >&2
	exit 1
fi
echo "pinned: $count containers run $ref"
