#!/usr/bin/env bash
# stress.sh runs the Go suite STRESS_N times (default 3) with two CPU burners
# beside it, as a loaded CI machine would be, and prints each failure: the
# failing tests' names and their output. It exits non-zero if any run failed.
#
#   STRESS_N      runs (default 3)
#   STRESS_PKGS   packages (default ./...)
#   STRESS_FLAGS  go test flags (default -race -shuffle=on -count=1 -timeout 40m)
#   STRESS_BURNERS  CPU burners (default 2)
set -euo pipefail

n=${STRESS_N:-3}
pkgs=${STRESS_PKGS:-./...}
flags=${STRESS_FLAGS:--race -shuffle=on -count=1 -timeout 40m}
burners=${STRESS_BURNERS:-2}

logs=$(mktemp -d "${TMPDIR:-/tmp}/envd-stress.XXXXXX")
burner_pids=()
test_pid=

cleanup() {
	# Only what this script started, by pid.
	if [[ -n $test_pid ]]; then kill -- "$test_pid" 2>/dev/null || true; fi
	for pid in "${burner_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${burner_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'echo "stress: interrupted" >&2; exit 130' INT TERM

for ((i = 0; i < burners; i++)); do
	(while :; do :; done) &
	burner_pids+=($!)
done
echo "stress: $n run(s) of go test $flags $pkgs, beside $burners CPU burner(s) (pids ${burner_pids[*]}); logs in $logs"

failed_runs=0
declare -a summary
for ((run = 1; run <= n; run++)); do
	log="$logs/run-$run.json"
	started=$SECONDS
	# -json: each test's output is attributed to it, even with -p > 1.
	# shellcheck disable=SC2086
	go test -json $flags $pkgs >"$log" 2>"$logs/run-$run.stderr" &
	test_pid=$!
	status=0
	wait "$test_pid" || status=$?
	test_pid=
	took=$((SECONDS - started))
	# The failed tests, each with its output, and packages that failed
	# outside any test (a build error, a panic in TestMain, a leak).
	report=$(python3 - "$log" <<'PY'
import json, sys
out, failed = {}, []
for line in open(sys.argv[1], errors="replace"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    key = (e.get("Package", ""), e.get("Test") or "(package)")
    if e.get("Action") == "output":
        out.setdefault(key, []).append(e.get("Output", ""))
    elif e.get("Action") == "fail" and key not in failed:
        failed.append(key)
# A parent fails with its subtests: name the leaves, show each once.
names = {t for _, t in failed}
for pkg, test in failed:
    if test != "(package)" and any(n.startswith(test + "/") for n in names):
        continue
    if test == "(package)" and any(p == pkg and t != "(package)" for p, t in failed):
        continue
    print(f"=== FAIL {pkg} {test}")
    print("".join(out.get((pkg, test), [])[-200:]), end="")
PY
)
	if ((status == 0)) && [[ -z $report ]]; then
		summary+=("run $run: ok (${took}s)")
		echo "stress: run $run/$n ok in ${took}s"
		continue
	fi
	failed_runs=$((failed_runs + 1))
	names=$(grep '^=== FAIL ' <<<"$report" | cut -d' ' -f3- | paste -sd, - || true)
	summary+=("run $run: FAILED (${took}s): ${names:-go test exited $status}")
	echo "stress: run $run/$n FAILED in ${took}s (go test exited $status)"
	[[ -n $report ]] && echo "$report"
	if [[ -s $logs/run-$run.stderr ]]; then
		echo "=== go test stderr"
		tail -n 60 "$logs/run-$run.stderr"
	fi
done

echo
echo "stress summary: $((n - failed_runs)) of $n run(s) passed"
printf '  %s\n' "${summary[@]}"
if ((failed_runs > 0)); then
	echo "the full logs (go test -json) are in $logs"
	exit 1
fi
rm -rf "$logs"
