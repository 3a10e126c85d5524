#!/usr/bin/env bash
# Upload and download of a 1 GiB file through envd with curl, against cp of
# the same file, in the same run: MB/s, the ratio of times (envd / cp; the
# goal is at most 1.5) and envd's peak RSS (VmHWM; the goal is under 64 MiB).
# A second baseline, "tcp floor", copies the file over a bare loopback TCP
# connection (sendfile into splice, bench/tcpfloor): no HTTP transfer of the
# file can beat it on this machine, so envd's time over it is what envd adds.
# Each transfer runs BENCH_FILE_RUNS times (default 3); the best time counts.
#
#   bench/files.sh                 # builds bin/envd
#   ENVD_BIN=/path/envd bench/files.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
runs=${BENCH_FILE_RUNS:-3}
size_mib=${BENCH_FILE_MIB:-1024}

if [[ -z ${ENVD_BIN:-} ]]; then
	make -s build
	ENVD_BIN=$PWD/bin/envd
fi
for tool in curl cp python3; do
	command -v "$tool" >/dev/null || { echo "files.sh: $tool is missing" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/envd-bench-files.XXXXXX")
chmod 777 "$work"
envd_pid=
cleanup() {
	if [[ -n $envd_pid ]]; then
		kill -TERM "$envd_pid" 2>/dev/null || true
		wait "$envd_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$ENVD_BIN" -host 127.0.0.1 -forward-ports=false -port "$port" -code-port 0 -no-jupyter -log-level warn >"$work/envd.log" 2>&1 &
envd_pid=$!
url=http://127.0.0.1:$port
for _ in $(seq 200); do
	curl -fsS -o /dev/null "$url/health" 2>/dev/null && break
	sleep 0.05
done
curl -fsS -o /dev/null "$url/health"

go build -o "$work/tcpfloor" ./bench/tcpfloor

src=$work/src.bin
head -c "$((size_mib << 20))" /dev/urandom >"$src"
cat "$src" >/dev/null # in the page cache, for every contender alike
bytes=$(stat -c %s "$src")

now() { date +%s.%N; }
# best SECONDS_VAR CMD...: run CMD $runs times, keep the shortest time.
best() {
	local -n out=$1
	shift
	out=
	for _ in $(seq "$runs"); do
		local t0 t1
		t0=$(now)
		"$@"
		t1=$(now)
		out=$(awk -v a="$t0" -v b="$t1" -v o="$out" 'BEGIN { d = b - a; if (o == "" || d < o) o = d; printf "%.4f", o }')
	done
}

copy() { rm -f "$work/cp.bin"; cp "$src" "$work/cp.bin"; }
upload() {
	curl -fsS -o /dev/null -H 'Expect:' -H 'Content-Type: application/octet-stream' \
		-X POST -T "$src" "$url/files?path=$work/up.bin"
}
upload_multipart() {
	curl -fsS -o /dev/null -H 'Expect:' -F "file=@$src" "$url/files?path=$work/upm.bin"
}
download() { rm -f "$work/down.bin"; curl -fsS -o "$work/down.bin" "$url/files?path=$work/up.bin"; }

floor() { "$work/tcpfloor" "$src" "$work/floor.bin" >/dev/null; }

best t_cp copy
best t_floor_wall floor
best t_up upload
best t_upm upload_multipart
best t_down download
cmp -s "$src" "$work/up.bin" || { echo "files.sh: uploaded file differs" >&2; exit 1; }
cmp -s "$src" "$work/upm.bin" || { echo "files.sh: multipart-uploaded file differs" >&2; exit 1; }
cmp -s "$src" "$work/down.bin" || { echo "files.sh: downloaded file differs" >&2; exit 1; }
hwm=$(awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$envd_pid/status")

report() { # name seconds
	awk -v n="$1" -v t="$2" -v c="$t_cp" -v f="$t_floor_wall" -v b="$bytes" \
		'BEGIN { printf "%-28s %7.3f s %8.0f MB/s   %5.2fx cp   %5.2fx tcp floor\n", n, t, b / t / 1e6, t / c, t / f }'
}
echo "files: $((bytes >> 20)) MiB, best of $runs runs, in $work (on $(df --output=fstype "$work" | tail -1))"
report "cp (baseline)" "$t_cp"
report "tcp floor (baseline)" "$t_floor_wall"
report "upload (curl, octet-stream)" "$t_up"
report "upload (curl, multipart)" "$t_upm"
report "download (curl)" "$t_down"
echo "envd peak RSS (VmHWM): $hwm MiB"
