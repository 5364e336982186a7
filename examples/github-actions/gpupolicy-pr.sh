#!/usr/bin/env bash
# The per-policy logic of workflow.yaml, as a script a test runs (examples/github_actions_test.go).
# Copy it to .github/gpupolicy-pr.sh next to the workflow.
#
#   gpupolicy-pr.sh diff BASE_ROOT REPORT
#       For each clusters/*/gpupolicy.yaml (run from the repository root), appends to REPORT the
#       diff against the same file under BASE_ROOT (a checkout of the pull request's base), or
#       the audit of a policy that is new. Prints status=N: 2 when any policy has errors (it is
#       invalid, or the diff or audit of it failed), else 1 when any has warnings, else 0. The
#       worst policy decides, whatever the order: a later clean or warning policy never lowers
#       an earlier error.
#   gpupolicy-pr.sh verdict STATUS ACCEPT
#       Exits 1 on STATUS 2, and on STATUS 1 unless ACCEPT is "true" (the pull request carries
#       the label gpupolicy/accept-warnings); prints a GitHub annotation either way.
#
# GPUPOLICY_FN names the gpupolicy-fn command (default: gpupolicy-fn on PATH).
set -euo pipefail

fn=${GPUPOLICY_FN:-gpupolicy-fn}

usage() {
	echo "usage: $0 diff BASE_ROOT REPORT | $0 verdict STATUS ACCEPT" >&2
	exit 2
}

# section POLICY TITLE ERRFILE appends a policy's failure to the report, with what the command said.
section() {
	printf '# %s\n\n**error**: %s:\n\n```\n%s\n```\n\n' "$1" "$2" "$(cat "$3")" >>"$report"
}

diff_all() {
	local base_root=$1 status=0 sev policy base
	report=$2
	local err
	err=$(mktemp)
	trap 'rm -f "$err"' RETURN
	: >"$report"
	shopt -s nullglob
	local policies=(clusters/*/gpupolicy.yaml)
	if [ ${#policies[@]} -eq 0 ]; then
		printf 'No GPUPolicy under clusters/*/gpupolicy.yaml.\n' >>"$report"
	fi
	for policy in "${policies[@]}"; do
		base="$base_root/$policy"
		if [ ! -f "$base" ]; then
			printf '# %s\n\nNew policy: its audit follows.\n\n' "$policy" >>"$report"
			if "$fn" audit -f "$policy" >>"$report" 2>"$err"; then
				sev=0
			else
				section "$policy" "gpupolicy-fn audit failed" "$err"
				sev=2
			fi
		elif ! "$fn" diff --fail-on none "$base" "$policy" >>"$report" 2>"$err"; then
			# An invalid policy (either side) or an unreadable file: the comment says why.
			section "$policy" "gpupolicy-fn diff failed" "$err"
			sev=2
		elif "$fn" diff --fail-on warning -o json "$base" "$policy" >/dev/null 2>&1; then
			sev=0
		elif "$fn" diff --fail-on error -o json "$base" "$policy" >/dev/null 2>&1; then
			sev=1
		else
			sev=2
		fi
		if [ "$sev" -gt "$status" ]; then
			status=$sev
		fi
	done
	echo "status=$status"
}

verdict() {
	case "$1" in
	0) echo "gpupolicy: no findings" ;;
	1)
		if [ "$2" = true ]; then
			echo "::warning::gpupolicy diff warnings accepted by label gpupolicy/accept-warnings"
		else
			echo "::error::gpupolicy diff found warnings, e.g. an upgrade window (see the comment); split the change or add the label gpupolicy/accept-warnings"
			exit 1
		fi
		;;
	2)
		echo "::error::gpupolicy diff found errors (see the comment); the label gpupolicy/accept-warnings does not accept errors"
		exit 1
		;;
	*)
		echo "::error::gpupolicy: status '$1' is not 0, 1 or 2: the diff step did not finish (see its log)"
		exit 1
		;;
	esac
}

case "${1:-}" in
diff)
	[ $# -eq 3 ] || usage
	diff_all "$2" "$3"
	;;
verdict)
	[ $# -eq 3 ] || usage
	verdict "$2" "$3"
	;;
*) usage ;;
esac
