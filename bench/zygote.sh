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
# Prints ROW lines for bench/run.sh (envd's figure: -zygote's; baseline:
# today's) and a per-process breakdown of the PSS.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
runs=${BENCH_ZYGOTE_RUNS:-7}
bin=${ENVD_BIN:-}
if [[ -z $bin ]]; then
	make -s build
	bin=$PWD/bin/envd
fi
work=$(mktemp -d)
envd_pid=
cleanup() {
	if [[ -n $envd_pid ]]; then kill "$envd_pid" 2>/dev/null || true; wait "$envd_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

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

start() { # start MODE FLAGS...
	local p
	p=$(port)
	shift
	"$bin" -host 127.0.0.1 -forward-ports=false -port "$p" -code-port 0 "$@" >"$work/envd.log" 2>&1 &
	envd_pid=$!
	url=http://127.0.0.1:$p
	for _ in $(seq 600); do
		if curl -sf -XPOST "$url/execute" -d '{"code":"1"}' 2>/dev/null | grep -q end_of_execution; then return; fi
		sleep 0.2
	done
	echo "envd did not become ready" >&2
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

# measure MODE FLAGS...: prints "pss ctx_ms import_ms".
measure() {
	local mode=$1 want=2 i ctx_ms=() imp_ms=() id t0 t1 out
	start "$@"
	[[ $mode == zygote ]] && want=3 # the default kernel, the zygote, the prestarted fork
	settle "$want"
	local mb
	mb=$(pss "$mode")
	for ((i = 0; i < runs; i++)); do
		settle "$want"
		out=$(curl -sf -XPOST "$url/contexts" -H 'Content-Type: application/json' -d '{"language":"python"}' -w '\n%{time_total}')
		id=$(head -1 <<<"$out" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
		ctx_ms+=("$(echo "$(tail -1 <<<"$out") * 1000" | bc -l)")
		out=$(curl -sf -XPOST "$url/execute" -H 'Content-Type: application/json' \
			-d "{\"code\":\"$code\",\"context_id\":\"$id\"}" | /usr/bin/python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("type") == "stdout": print(m["text"].strip())
    if m.get("type") == "error": sys.exit("error: %s" % m)')
		imp_ms+=("$out")
		curl -sf -XDELETE "$url/contexts/$id" >/dev/null
		sleep 1 # the deleted kernel goes before settle counts
	done
	kill "$envd_pid"
	wait "$envd_pid" || true
	envd_pid=
	echo "$mb $(printf '%s\n' "${ctx_ms[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') $(printf '%s\n' "${imp_ms[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
}

read -r z_pss z_ctx z_imp < <(measure zygote -zygote)
read -r t_pss t_ctx t_imp < <(measure today)
printf 'idle PSS: -zygote %.1f MB, today %.1f MB\n' "$z_pss" "$t_pss"
printf 'createCodeContext median: -zygote %.1f ms, today %.1f ms\n' "$z_ctx" "$t_ctx"
printf 'first data-stack import median: -zygote %.1f ms, today %.1f ms\n' "$z_imp" "$t_imp"
ratio() { echo "$1 / $2" | bc -l | xargs printf '%.2f'; }
printf 'ROW\tzygote-import\t%.1f\t%.1f\t%s\n' "$z_imp" "$t_imp" "$(ratio "$z_imp" "$t_imp")"
printf 'ROW\tzygote-pss\t%.1f\t%.1f\t%s\n' "$z_pss" "$t_pss" "$(ratio "$z_pss" "$t_pss")"
printf 'ROW\tzygote-ctx\t%.1f\t%.1f\t%s\n' "$z_ctx" "$t_ctx" "$(ratio "$z_ctx" "$t_ctx")"
