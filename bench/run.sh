#!/usr/bin/env bash
# Runs every benchmark (`make bench`), then prints one table with a row for
# each measured path: envd's figure, the in-run baseline's (the same work
# done directly), the ratio (always envd's cost over the baseline's, lower
# is better; a throughput row as baseline rate / envd rate), the goal, and
# MET or MISSED; the cold-* rows (bench/coldctx.sh, as root) compare the
# first context of a language on a cold machine with the second, their
# baseline. Rows without a goal are printed for information. Not a test:
# MISSED does not fail it; a piece that fails (or a row no piece measured)
# shows as "not measured", and makes it exit 1 once the table is printed.
#
# Each piece prints its own lines, and machine-readable ones for the table:
#   ROW <TAB> key <TAB> envd's figure <TAB> baseline's figure <TAB> ratio
# The keys, labels and goals are in the rows list below.
#
# Run counts (defaults give a full run of several minutes; small ones for a
# quick look): BENCH_RUNS (200 sequential commands.run and runCode calls;
# BENCH_CODE_RUNS sets runCode's alone), BENCH_CONC_ROUNDS (20 rounds of
# 100 concurrent commands.run), BENCH_CODE_STARTS (15 createCodeContext
# calls of each kind), BENCH_STREAM_RUNS (3 streams of BENCH_STREAM_MIB,
# 1024, to a Go client; BENCH_STREAM_ENVCTL_RUNS: 7 to envctl),
# BENCH_FILE_RUNS (7 rounds of transfers of BENCH_FILE_MIB, 1024),
# BENCH_START_RUNS (5 envd starts), BENCH_COLD_RUNS (1 cold machine per
# language), BENCH_ZYGOTE_RUNS (7 new contexts with and without -zygote).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
make -s build envctl
export ENVD_BIN=$PWD/bin/envd
export BENCH_RUNS=${BENCH_RUNS:-200}
export BENCH_CODE_RUNS=${BENCH_CODE_RUNS:-$BENCH_RUNS}

# key, label, goal (the ratio's upper bound; <N: an upper bound on envd's
# own figure, for the rows whose baseline is today's figure rather than a
# floor; - for none), in the table's order.
rows="$(
	cat <<'EOF'
cmd|commands.run('true') through the SDK, median|1.10
cmd-floor|  the same through the SDK to a bare Go spawner (bench/spawnfloor)|-
code|runCode('x=1') through the SDK vs a plain kernel, median|1.10
code-same|  runCode('x=1') vs envd's own kernel over ZeroMQ (transport only)|-
cmd100|100 concurrent commands.run('true'), p99|1.15
stream-h2c|1 GiB stdout to a Go client, h2c (rate)|1.25
stream-http1|1 GiB stdout to a Go client, HTTP/1.1 (rate)|1.25
stream-h2c-gzip|  256 MiB stdout to a Go client, h2c + gzip (rate)|-
stream-envctl|1 GiB stdout to envctl run (rate; 1.17: 0.85 of the relay's)|1.17
files-download|1 GiB download vs net/http (rate)|1.05
files-upload|1 GiB octet-stream upload vs net/http (rate)|1.05
files-multipart|1 GiB multipart upload vs net/http (rate)|1.05
files-download-tcp|  1 GiB download vs raw TCP (rate)|-
files-upload-tcp|  1 GiB octet-stream upload vs raw TCP (rate)|-
files-multipart-tcp|  1 GiB multipart upload vs raw TCP (rate)|-
ctx-warm|createCodeContext(), prestarted kernel, median|0.1
zygote-ctx|createCodeContext(), -zygote vs today's, ms, median|<10
zygote-import|first data-stack import, new context, -zygote vs today's, ms|<50
zygote-import-default|  the same in the default context (its first cell)|-
zygote-pss|idle sandbox PSS, -zygote vs today's, MB|<130
ctx-cold|createCodeContext(), -warm-kernels python=0, median|1.2
start|envd start to the first runCode result, median|1.1
cold-python|first python context + cell, cold machine, vs the second|1.5
cold-javascript|first javascript context + cell, cold machine, vs the second|1.5
cold-typescript|first typescript context + cell, cold machine, vs the second|1.5
cold-r|first r context + cell, cold machine, vs the second|1.5
cold-java|first java context + cell, cold machine, vs the second|1.5
cold-bash|first bash context + cell, cold machine, vs the second|1.5
EOF
)"

out=$(mktemp "${TMPDIR:-/tmp}/envd-bench.XXXXXX")
trap 'rm -f "$out"' EXIT
failed=()
# piece NAME CMD...: run one benchmark, its output shown and kept for the table.
piece() {
	local name=$1
	shift
	echo
	echo "== $name"
	if ! "$@" | tee -a "$out"; then
		failed+=("$name")
		echo "== $name FAILED" >&2
	fi
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
piece "commands.run('true'), one at a time and 100 at once" \
	node bench/sdk-commands.mjs "$BENCH_RUNS" "${BENCH_CONC_ROUNDS:-20}"
piece "runCode('x=1') and createCodeContext()" bench/code.sh
piece "1 GiB of stdout" bench/stream.sh
piece "1 GiB file transfers" bench/files.sh
piece "envd start to the first runCode result" node bench/start.mjs "${BENCH_START_RUNS:-5}"
piece "new contexts with Python kernels forked from the zygote, and idle memory" bench/zygote.sh
piece "the first context of each language on a cold machine vs the second" bench/coldctx.sh

echo
echo "== envd's cost over the baseline's in the same run (lower is better)"
echo "$(nproc) cores; load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
missing=0
awk -F'\t' -v rows="$rows" '
	$1 == "ROW" { envd[$2] = $3; base[$2] = $4; ratio[$2] = $5 }
	END {
		fmt = "%-66s %-15s %-15s %6s %9s  %s\n"
		printf fmt, "path", "envd", "baseline", "ratio", "goal", ""
		n = split(rows, line, "\n")
		for (i = 1; i <= n; i++) {
			split(line[i], f, "|")
			k = f[1]; goal = f[3]
			if (!(k in ratio)) {
				printf fmt, f[2], "-", "-", "-", (goal == "-" ? "" : goal), "not measured"
				if (goal != "-") missing = 1
				continue
			}
			if (goal == "-") {
				verdict = ""; shown = ""
			} else if (substr(goal, 1, 1) == "<") {
				verdict = envd[k] + 0 < substr(goal, 2) + 0 ? "MET" : "MISSED"; shown = goal " abs"
			} else {
				verdict = ratio[k] + 0 <= goal + 0 ? "MET" : "MISSED"; shown = "<= " goal
			}
			printf fmt, f[2], envd[k], base[k], ratio[k], shown, verdict
		}
		exit missing
	}' "$out" || missing=1

if ((${#failed[@]})); then
	echo "failed: ${failed[*]}" >&2
	exit 1
fi
if ((missing)); then
	echo "some rows were not measured" >&2
	exit 1
fi
