#!/usr/bin/env bash
# 1 GiB of a command's stdout (`head -c 1G /dev/zero`) through envd, against
# a bare relay in the same run: the same command's stdout copied from its
# pipe into a loopback TCP connection and discarded, in one Go process.
#   1. To a Go client (binary Connect codec): internal/process's
#      BenchmarkStreamThroughput, over h2c, HTTP/1.1 and h2c with gzip; its
#      cost/relay metric (relay rate / envd rate) is the ratio.
#   2. To `envctl run` (bin/envctl, output to /dev/null) against a real envd,
#      vs bench/relayfloor, interleaved run for run; ratio of median times,
#      of 7 runs each by default: both vary by 10-15% from run to run here
#      (two cores shared by head, envd and envctl), and a median of 3 moved
#      the ratio by as much as the goal's margin.
# Prints ROW lines for bench/run.sh's table.
#
#   bench/stream.sh                     # builds bin/envd and bin/envctl
#   BENCH_STREAM_RUNS=3 BENCH_STREAM_ENVCTL_RUNS=7 BENCH_STREAM_MIB=1024 bench/stream.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
. bench/lib.sh
runs=${BENCH_STREAM_RUNS:-3}
envctl_runs=${BENCH_STREAM_ENVCTL_RUNS:-7}
bytes=$((${BENCH_STREAM_MIB:-1024} << 20))
if [[ -z ${ENVD_BIN:-} ]]; then
	make -s build envctl
	ENVD_BIN=$PWD/bin/envd
fi
envctl=${ENVCTL_BIN:-$(dirname "$ENVD_BIN")/envctl}
[[ -x $envctl ]] || make -s envctl
failed=0

work=$(mktemp -d "${TMPDIR:-/tmp}/envd-bench-stream.XXXXXX")
cleanup() {
	stop_envd
	rm -rf "$work"
}
trap cleanup EXIT

echo "-- to a Go client: go test -bench BenchmarkStreamThroughput (${runs}x $((bytes >> 20)) MiB; gzip 256 MiB at most)"
# A sub-benchmark's line: name, N, ns/op, MB/s, then "value unit" pairs.
go test -run '^$' -bench BenchmarkStreamThroughput -benchtime "${runs}x" ./internal/process/ -args -stream-bytes "$bytes" | tee "$work/go.txt" || failed=1
awk '$1 ~ /^BenchmarkStreamThroughput\// {
	name = $1; sub(/^BenchmarkStreamThroughput\//, "", name); sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i++) m[$(i + 1)] = $i
	if (m["cost/relay"] != "")
		printf "ROW\tstream-%s\t%.0f MB/s\t%.0f MB/s\t%.2f\n", name, m["envd-MB/s"], m["relay-MB/s"], m["cost/relay"]
	delete m
}' "$work/go.txt"

echo "-- to envctl run: $envctl_runs interleaved runs of $((bytes >> 20)) MiB each"
go build -o "$work/relayfloor" ./bench/relayfloor
start_envd "$work/envd.log" -no-jupyter
t_envctl=()
t_relay=()
for _ in $(seq "$envctl_runs"); do
	t0=$(now)
	"$envctl" --addr "$envd_url" run --no-stdin -- head -c "$bytes" /dev/zero >/dev/null
	t1=$(now)
	t_envctl+=("$(elapsed "$t0" "$t1")")
	t0=$(now)
	"$work/relayfloor" "$bytes"
	t1=$(now)
	t_relay+=("$(elapsed "$t0" "$t1")")
done
stop_envd
e=$(median "${t_envctl[@]}")
r=$(median "${t_relay[@]}")
rate() { awk -v b="$bytes" -v t="$1" 'BEGIN { printf "%.0f MB/s", b / t / 1e6 }'; }
echo "envctl run, median of $envctl_runs: $e s ($(rate "$e")); times ${t_envctl[*]}"
echo "bare relay, median of $envctl_runs: $r s ($(rate "$r")); times ${t_relay[*]}"
row stream-envctl "$(rate "$e")" "$(rate "$r")" "$(awk -v e="$e" -v r="$r" 'BEGIN { printf "%.2f", e / r }')"
exit "$failed"
