#!/usr/bin/env bash
# memprobe.sh: envd's peak RSS (VmHWM) under the hostile inputs that could
# blow it up, each against the real binary with its real Jupyter server:
#   1. a 300 MiB print in a kernel, read by a client that keeps up
#   2. 200 x 1 MiB prints while the /execute reader reads nothing
#   3. a 512 MiB unary Connect body
# Each probe runs in a fresh envd, so each peak is its own. Not a test: it
# prints numbers (envd aims to stay under 256 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
make -s build
bin=$PWD/bin/envd
work=$(mktemp -d)
envd_pid=
cleanup() {
	if [[ -n $envd_pid ]]; then kill "$envd_pid" 2>/dev/null || true; wait "$envd_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() {
	local p
	p=$(port)
	"$bin" -host 127.0.0.1 -forward-ports=false -port "$p" -code-port 0 >"$work/envd.log" 2>&1 &
	envd_pid=$!
	url=http://127.0.0.1:$p
	for _ in $(seq 600); do
		if curl -sf -o /dev/null "$url/health" && curl -sf -o /dev/null "$url/contexts"; then
			# the default Python context answers
			if curl -sf -XPOST "$url/execute" -d '{"code":"1"}' | grep -q end_of_execution; then return; fi
		fi
		sleep 0.2
	done
	echo "envd did not become ready" >&2
	cat "$work/envd.log" >&2
	exit 1
}

stop() {
	local hwm
	hwm=$(awk '/VmHWM/ {print $2}' "/proc/$envd_pid/status")
	kill "$envd_pid"
	wait "$envd_pid" || true
	envd_pid=
	awk -v w="$1" -v k="$hwm" 'BEGIN { printf "%-62s peak RSS %6.1f MiB\n", w, k / 1024 }'
}

start
bytes=$(curl -sf -XPOST "$url/execute" -d '{"code":"print(\"x\"*(300<<20))"}' | wc -c)
stop "300 MiB print, reader keeps up ($((bytes >> 20)) MiB of NDJSON read)"

start
# The reader reads nothing for 60 s: curl's output pipe to sleep fills, then
# the socket's buffers, then envd's queues.
(curl -sf -XPOST "$url/execute" -d '{"code":"for i in range(200): print(\"y\"*(1<<20))"}' | (sleep 60; wc -c >"$work/stalled")) &
reader=$!
wait "$reader" || true
stop "200 x 1 MiB, reader stalled 60 s ($(( $(cat "$work/stalled") >> 20 )) MiB read after)"

start
head -c $((512 << 20)) /dev/zero | tr '\0' ' ' >"$work/body"
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST -H 'Content-Type: application/json' \
	--data-binary @"$work/body" "$url/process.Process/List" || true)
stop "512 MiB unary Connect body (HTTP $code)"
