#!/usr/bin/env bash
# The first context of each language in a new sandbox against the second:
# for each language, a fresh envd on a cold machine (scripts/fresh-machine.sh:
# the page cache dropped, new empty homes for root and `user`, a new /tmp)
# creates a context of that language and runs one typical cell in it, then
# does the same with a second context. Each context's figure is POST
# /contexts plus its first POST /execute (the kernel's start and its first
# cell), timed from outside; the ratio is first / second.
#
# "Cold" is a new sandbox made from the image: nothing of the machine's
# page cache, and the homes as the image made them. fresh-machine.sh makes
# the homes empty; the image's homes hold the caches scripts/install-deps.sh
# builds there (see install_kernel_caches), so `install-deps.sh --caches`
# builds them in the new homes first (what it builds outside the homes, the
# Java kernel's prebuilt agent in /var/cache/envd, is the machine's, as in
# the image), then the page cache is dropped.
#
# envd runs with -warm-kernels '' so that each context starts its own kernel
# (a prestarted one would hide the start); the timing starts once code can
# run, i.e. once the default Python context's kernel is up (so the first
# python context is the machine's second Python kernel: its figure is mostly
# the data stack's first import). Each context's line also tells the CPU
# time envd's processes and kernels spent on it and what they read from
# storage (the page cache's misses): on a busy machine the wall times vary
# with the load, those two much less. The cells:
#   python      import pandas, numpy, matplotlib.pyplot
#   javascript  1+1, then an import of Deno's node:path
#   typescript  the same, typed
#   r           library(stats); 1
#   java        1+1
#   bash        echo hi
#
#   bench/coldctx.sh [LANGUAGE...]      (default: all six)
#
#   BENCH_COLD_RUNS     fresh machines per language (default 1); the
#                       medians of first and second are compared
#   BENCH_COLD_STRICT=1 run envd with -strict-users (kernels as `user`;
#                       default: as in a default sandbox, kernels as root)
#   BENCH_COLD_EMPTY_HOMES=1  leave the new homes empty (no --caches step): a
#                       machine whose homes never got install-deps.sh's caches
#   ENVD_BIN            the envd to run (default: make build)
#
# Prints each language's figures and ROW lines for bench/run.sh's table
# (cold-LANGUAGE). Needs root (fresh-machine.sh); drops the page cache once
# per run, which slows everything else on the machine for a while.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

all_langs=(python javascript typescript r java bash)

code_of() {
	case $1 in
	python) echo 'import pandas, numpy, matplotlib.pyplot' ;;
	javascript) printf '%s\n' 'import { join } from "node:path";' 'join("a", "b"); 1 + 1' ;;
	typescript) printf '%s\n' 'import { join } from "node:path";' 'const p: string = join("a", "b");' 'const n: number = 1 + 1; n' ;;
	r) echo 'library(stats); 1' ;;
	java) echo '1+1' ;;
	bash) echo 'echo hi' ;;
	*) return 1 ;;
	esac
}

# --- inside a fresh machine: one language --------------------------------
if [[ ${1:-} == --inside ]]; then
	lang=$2
	code=$(code_of "$lang")
	# The homes as the image made them (see the top).
	if [[ ${BENCH_COLD_EMPTY_HOMES:-0} != 1 ]]; then
		scripts/install-deps.sh --caches >&2
	fi
	sync
	echo 3 >/proc/sys/vm/drop_caches

	work=$(mktemp -d)
	trap 'stop_envd; rm -rf "$work"' EXIT
	code_port=$(free_port)
	flags=(-warm-kernels '' -run-dir '' -code-port "$code_port")
	[[ ${BENCH_COLD_STRICT:-0} == 1 ]] && flags+=(-strict-users)
	start_envd "$work/envd.log" "${flags[@]}"
	# Code can run once the default Python context exists.
	ready=0
	for _ in $(seq 1200); do
		if [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$code_port/health") == 200 ]]; then
			ready=1
			break
		fi
		sleep 0.1
	done
	if ((!ready)); then
		echo "coldctx: code could not run within 2 minutes; envd's log:" >&2
		tail -50 "$work/envd.log" >&2
		exit 1
	fi
	# tree_stats: CPU seconds and bytes read from storage (page cache
	# misses) so far by envd and every process under it, the kernels' too.
	tree_stats() {
		python3 - "$envd_pid" <<'EOF'
import os, sys
kids, todo, cpu, read = {}, [int(sys.argv[1])], 0, 0
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        f = open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    kids.setdefault(int(f[1]), []).append(int(p))
while todo:
    p = todo.pop()
    todo += kids.get(p, [])
    try:
        f = open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()
        cpu += sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")
        io = dict(line.split(": ") for line in open("/proc/%d/io" % p).read().splitlines())
        read += int(io["read_bytes"])
    except (OSError, KeyError, ValueError):
        pass
print("%.2f %d" % (cpu, read))
EOF
	}
	create_body=$(python3 -c 'import json, sys; print(json.dumps({"language": sys.argv[1]}))' "$lang")
	code_json=$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$code")
	figures=()
	for n in 1 2; do
		read -r cpu0 read0 < <(tree_stats)
		t0=$(now)
		ctx=$(curl -fsS -X POST -H 'Content-Type: application/json' -d "$create_body" "$envd_url/contexts")
		t1=$(now)
		[[ $ctx =~ \"id\":\ *\"([^\"]+)\" ]] || {
			echo "coldctx: $lang context $n: POST /contexts answered $ctx" >&2
			exit 1
		}
		out=$(curl -fsS -X POST -H 'Content-Type: application/json' \
			-d "{\"code\": $code_json, \"context_id\": \"${BASH_REMATCH[1]}\"}" "$envd_url/execute")
		t2=$(now)
		read -r cpu1 read1 < <(tree_stats)
		if grep -q '"type": *"error"' <<<"$out"; then
			echo "coldctx: $lang context $n: the cell failed: $out" >&2
			echo "envd's log:" >&2
			tail -50 "$work/envd.log" >&2
			exit 1
		fi
		echo "$lang context $n: $(elapsed "$t0" "$t2") s (create $(elapsed "$t0" "$t1") s," \
			"first run $(elapsed "$t1" "$t2") s; CPU $(elapsed "$cpu0" "$cpu1") s," \
			"$(((read1 - read0) >> 20)) MiB read from storage)" >&2
		figures+=("$(elapsed "$t0" "$t2")")
	done
	echo "FIGURES ${figures[*]}"
	exit 0
fi

# --- outside: a fresh machine per language and run -----------------------
[[ $(id -u) == 0 ]] || {
	echo "coldctx: needs root (scripts/fresh-machine.sh)" >&2
	exit 2
}
export PATH=/usr/local/go/bin:$PATH
if [[ -z ${ENVD_BIN:-} ]]; then
	make -s build
	export ENVD_BIN=$PWD/bin/envd
fi
langs=("$@")
((${#langs[@]})) || langs=("${all_langs[@]}")
runs=${BENCH_COLD_RUNS:-1}
status=0
for lang in "${langs[@]}"; do
	code_of "$lang" >/dev/null || {
		echo "coldctx: unknown language $lang (one of ${all_langs[*]})" >&2
		exit 2
	}
	firsts=() seconds=()
	for ((i = 0; i < runs; i++)); do
		if ! out=$(FRESH_DROP_CACHES=0 FRESH_GO_CACHES=0 scripts/fresh-machine.sh "$PWD/bench/coldctx.sh" --inside "$lang" 2> >(grep -v '^fresh-machine:' >&2)); then
			echo "coldctx: $lang: run $((i + 1)) failed" >&2
			status=1
			continue 2
		fi
		read -r _ first second < <(grep '^FIGURES ' <<<"$out")
		firsts+=("$first") seconds+=("$second")
	done
	first=$(median "${firsts[@]}")
	second=$(median "${seconds[@]}")
	ratio=$(awk -v a="$first" -v b="$second" 'BEGIN { printf "%.2f", a / b }')
	echo "$lang: first context ${first} s, second ${second} s, ratio $ratio"
	row "cold-$lang" "$(awk -v a="$first" 'BEGIN { printf "%.2f s", a }')" "$(awk -v a="$second" 'BEGIN { printf "%.2f s", a }')" "$ratio"
done
exit "$status"
