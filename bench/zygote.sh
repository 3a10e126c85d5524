#!/usr/bin/env bash
# zygote.sh: what a user of a fresh context feels, with Python kernels
# forked from the zygote (-zygote) and as today (every kernel started),
# each in an envd of its own with its real Jupyter server and the default
# prestarted kernel (-warm-kernels python=1):
#   - createCodeContext(), median of BENCH_ZYGOTE_RUNS (7)
#   - the first `import pandas, numpy, matplotlib.pyplot` in that new
#     context, timed in the kernel, median
#   - the idle sandbox's memory: PSS summed over envd and everything it
#     started (Jupyter, the kernels, the zygote), once the default context
#     and the prestarted kernel are up and the machine has settled
#   - the same first import in the default context (once: the first)
# Prints ROW lines for bench/run.sh (envd's figure: -zygote's; baseline:
# today's; plain numbers, which the table's absolute goals compare) and a
# per-process breakdown of the PSS.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
. bench/lib.sh
runs=${BENCH_ZYGOTE_RUNS:-7}
if [[ -z ${ENVD_BIN:-} ]]; then
	make -s build
	ENVD_BIN=$PWD/bin/envd
fi
work=$(mktemp -d)
trap 'stop_envd; rm -rf "$work"' EXIT

# descendants PID: PID and every process under it.
descendants() {
	local p=$1 c
	echo "$p"
	for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do descendants "$c"; done
}

# kernels: how many Python kernel processes (and zygotes) envd's tree holds.
kernels() {
	local n=0 p
	for p in $(descendants "$envd_pid"); do
		if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q ipykernel_launcher; then n=$((n + 1)); fi
	done
	echo "$n"
}

# start MODE FLAGS...: envd with Jupyter, once its default Python context
# answers.
start() {
	shift
	start_envd "$work/envd.log" "$@"
	url=$envd_url
	for _ in $(seq 600); do
		if curl -sf -XPOST "$url/execute" -d '{"code":"1"}' 2>/dev/null | grep -q end_of_execution; then return; fi
		sleep 0.2
	done
	echo "envd's default context never answered" >&2
	cat "$work/envd.log" >&2
	exit 1
}

# settle N: waits until N kernel processes are up, then for the machine
# to be idle (5 s).
settle() {
	for _ in $(seq 600); do
		if (($(kernels) >= $1)); then
			sleep 5
			return
		fi
		sleep 0.2
	done
	echo "the prestarted kernel never came up" >&2
	exit 1
}

# pss MODE: the tree's PSS in MB, and a line per process.
pss() {
	local total=0 p kb name
	for p in $(descendants "$envd_pid"); do
		kb=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
		name=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-90)
		printf '  %-8s %6.1f MB  %s\n' "$1" "$(echo "$kb / 1024" | bc -l)" "$name" >&2
		total=$((total + kb))
	done
	echo "$total / 1024" | bc -l
}

code='import time as t0\ns = t0.perf_counter()\nimport pandas, numpy, matplotlib.pyplot\nprint(round((t0.perf_counter() - s) * 1000, 1))'

# timed_import [CONTEXT]: the data stack's import in a context (the
# default one without CONTEXT), in ms as the kernel timed it.
timed_import() {
	local ctx=
	[[ -n ${1:-} ]] && ctx=",\"context_id\":\"$1\""
	curl -sf -XPOST "$url/execute" -H 'Content-Type: application/json' \
		-d "{\"code\":\"$code\"$ctx}" | /usr/bin/python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("type") == "stdout": print(m["text"].strip())
    if m.get("type") == "error": sys.exit("error: %s" % m)'
}

# measure MODE FLAGS...: prints "pss ctx_ms import_ms default_import_ms".
measure() {
	local mode=$1 want=2 i ctx_ms=() imp_ms=() id t0 t1 out
	start "$@"
	[[ $mode == zygote ]] && want=3 # the default kernel, the zygote, the prestarted fork
	settle "$want"
	local mb def
	mb=$(pss "$mode")
	def=$(timed_import)
	for ((i = 0; i < runs; i++)); do
		settle "$want"
		out=$(curl -sf -XPOST "$url/contexts" -H 'Content-Type: application/json' -d '{"language":"python"}' -w '\n%{time_total}')
		id=$(head -1 <<<"$out" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
		ctx_ms+=("$(echo "$(tail -1 <<<"$out") * 1000" | bc -l)")
		imp_ms+=("$(timed_import "$id")")
		curl -sf -XDELETE "$url/contexts/$id" >/dev/null
		sleep 1 # the deleted kernel goes before settle counts
	done
	stop_envd
	echo "$mb $(median "${ctx_ms[@]}") $(median "${imp_ms[@]}") $def"
}

read -r z_pss z_ctx z_imp z_def < <(measure zygote -zygote)
read -r t_pss t_ctx t_imp t_def < <(measure today)
printf 'idle PSS: -zygote %.1f MB, today %.1f MB\n' "$z_pss" "$t_pss"
printf 'createCodeContext median: -zygote %.1f ms, today %.1f ms\n' "$z_ctx" "$t_ctx"
printf 'first data-stack import median: -zygote %.1f ms, today %.1f ms\n' "$z_imp" "$t_imp"
printf 'first data-stack import, default context: -zygote %.1f ms, today %.1f ms\n' "$z_def" "$t_def"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
one() { awk -v a="$1" 'BEGIN { printf "%.1f", a }'; }
row zygote-import "$(one "$z_imp")" "$(one "$t_imp")" "$(ratio "$z_imp" "$t_imp")"
row zygote-import-default "$(one "$z_def")" "$(one "$t_def")" "$(ratio "$z_def" "$t_def")"
row zygote-pss "$(one "$z_pss")" "$(one "$t_pss")" "$(ratio "$z_pss" "$t_pss")"
row zygote-ctx "$(one "$z_ctx")" "$(one "$t_ctx")" "$(ratio "$z_ctx" "$t_ctx")"
