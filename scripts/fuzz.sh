#!/usr/bin/env bash
# fuzz.sh runs every native Go fuzz target of the module (each
# `func FuzzXxx(f *testing.F)` in a package's *_test.go, found anew each
# run), one at a time, each for FUZZTIME, and prints a line per target:
# result, target, package, time taken, executions counted. It exits
# non-zero if any target failed; Go writes the input that failed under the
# package's testdata/fuzz/FuzzXxx/, and the line after the failure names
# it.
#
#   FUZZTIME          how long each target runs (default 1m), as go test
#                     -fuzztime takes it: 30s, 10m, or 5000x (executions)
#   FUZZMINIMIZETIME  how long a worker may spend shrinking an input (default
#                     5s; Go's own 60s spends most of a short run shrinking
#                     each input that finds new code, for targets that write
#                     files, such as tar extraction)
#   FUZZPARALLEL      fuzzing workers per target (default 2)
#   FUZZTIMEOUT       go test -timeout of each target (default FUZZTIME plus
#                     10m; 1h when FUZZTIME is a count)
#   FUZZSKIP          target names not to run, separated by spaces (e.g. the
#                     ones a long run already covered)
#
# Go 1.26's fuzzing coordinator may end a duration-limited run with a bare
# "context deadline exceeded" failure at FUZZTIME, having found nothing (a
# race at its own deadline, fixed in Go 1.27): such a run counts as
# passed, marked so; never one with a failing input or a failing seed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

fuzztime=${FUZZTIME:-1m}
minimize=${FUZZMINIMIZETIME:-5s}
parallel=${FUZZPARALLEL:-2}

# seconds is a Go duration of hours, minutes and seconds (90s, 10m, 1h30m)
# in seconds; nothing for anything else.
seconds() {
	local d=$1 total=0
	[[ $d =~ ^([0-9]+[hms])+$ ]] || return 0
	while [[ $d =~ ^([0-9]+)([hms])(.*)$ ]]; do
		case ${BASH_REMATCH[2]} in
		h) total=$((total + BASH_REMATCH[1] * 3600)) ;;
		m) total=$((total + BASH_REMATCH[1] * 60)) ;;
		s) total=$((total + BASH_REMATCH[1])) ;;
		esac
		d=${BASH_REMATCH[3]}
	done
	echo "$total"
}
timeout=${FUZZTIMEOUT:-}
if [[ -z $timeout ]]; then
	s=$(seconds "$fuzztime")
	if [[ -n $s ]]; then timeout="$((s + 600))s"; else timeout=1h; fi
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/envd-fuzz.XXXXXX")
test_pid=
cleanup() {
	# Only what this script started, by pid.
	if [[ -n $test_pid ]]; then kill -- "$test_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'echo "fuzz: interrupted; logs in $logs" >&2; exit 130' INT TERM

# Every package of the module with its directory, then each fuzz target in
# its test files: "PACKAGE-DIR TARGET" lines.
targets=()
while read -r dir; do
	shopt -s nullglob
	files=("$dir"/*_test.go)
	shopt -u nullglob
	((${#files[@]})) || continue
	while read -r name; do
		[[ " ${FUZZSKIP:-} " == *" $name "* ]] && continue
		targets+=("${dir#"$PWD"/} $name")
	done < <(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\).*/\1/p' "${files[@]}" | sort -u)
done < <(go list -f '{{.Dir}}' ./...)

if ((${#targets[@]} == 0)); then
	echo "fuzz: no fuzz target found" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${fuzztime} each, ${parallel} workers; logs in $logs"

failed=0
summary=()
for t in "${targets[@]}"; do
	dir=${t% *}
	name=${t#* }
	log="$logs/${dir//\//_}.$name.log"
	started=$SECONDS
	set +e
	go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" -fuzzminimizetime="$minimize" \
		-timeout="$timeout" "./$dir" -parallel="$parallel" >"$log" 2>&1 &
	test_pid=$!
	wait "$test_pid"
	status=$?
	test_pid=
	set -e
	took=$((SECONDS - started))
	result=PASS
	note=
	if ((status != 0)); then
		result=FAIL
		# The deadline race: the target's only failure, and no input.
		if grep -qx -- "--- FAIL: $name ([0-9.]*s)" "$log" && grep -qx $'    context deadline exceeded' "$log" &&
			(($(grep -c -- '--- FAIL' "$log") == 1)) && ! grep -q 'Failing input written' "$log"; then
			result=PASS note="  (ended by Go's own race at the fuzztime deadline: nothing found)"
		fi
	fi
	# The executions Go's last progress line counted (none for a run too
	# short to print one): the log goes with the run, the count stays.
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
	line=$(printf '%-4s  %-24s %-36s %4ds %11s execs%s' "$result" "$name" "./$dir" "$took" "${execs:--}" "$note")
	echo "$line"
	summary+=("$line")
	if [[ $result == FAIL ]]; then
		failed=$((failed + 1))
		# Go names the failing input relative to the package.
		input=$(sed -nE 's/.*Failing input written to (testdata\/fuzz\/[^ ]+).*/\1/p' "$log" | tail -1)
		if [[ -n $input ]]; then
			msg="      failing input: $dir/$input (re-run: go test -run='$name/${input##*/}' ./$dir)"
		else
			msg="      no failing input written: see $log"
		fi
		echo "$msg"
		summary+=("$msg")
		sed -e 's/^/      | /' "$log" | grep -v '^      | fuzz: elapsed' | tail -n 25
	fi
done

echo
echo "fuzz: summary (${fuzztime} each)"
printf '%s\n' "${summary[@]}"
if ((failed > 0)); then
	echo "fuzz: $failed of ${#targets[@]} targets FAILED; their logs are in $logs"
	exit 1
fi
rm -rf "$logs"
echo "fuzz: all ${#targets[@]} targets passed"
