#!/usr/bin/env bash
# Download, octet-stream upload and multipart upload of a 1 GiB file through
# envd with curl, against the same curl command lines aimed at a bare Go
# net/http server doing the same transfers (bench/httpfloor: http.ServeFile;
# io.Copy into a file), in the same run. Also printed, with no goal: each
# transfer's time over raw TCP's (bench/tcpfloor copies the file over a bare
# loopback connection, sendfile into splice: no HTTP transfer of the file can
# beat it on this machine), over cp's, and envd's peak RSS (VmHWM).
# Runs are interleaved (every contender once per round, BENCH_FILE_RUNS
# rounds, default 7), each after a sync; each contender's best time counts:
# on this machine a 1 GiB transfer into tmpfs takes 1x to 3x its best time
# at random, whoever serves it (envd and net/http alike), so 3 rounds could
# leave either without one good run. Prints ROW lines for
# bench/run.sh's table; each ratio is envd's time over the baseline's.
# The files live in a tmpfs (/dev/shm when there is one; BENCH_FILES_DIR to
# choose): on a disk, writeback of the previous gigabyte lands at random in
# later transfers (the upload rows varied from 1.1x to 2.2x between runs).
# BENCH_FILES_DIR=/tmp measures the disk too.
#
#   bench/files.sh                 # builds bin/envd
#   ENVD_BIN=/path/envd BENCH_FILE_MIB=256 bench/files.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
. bench/lib.sh
runs=${BENCH_FILE_RUNS:-7}
size_mib=${BENCH_FILE_MIB:-1024}

if [[ -z ${ENVD_BIN:-} ]]; then
	make -s build
	ENVD_BIN=$PWD/bin/envd
fi
for tool in curl cp cmp python3; do
	command -v "$tool" >/dev/null || { echo "files.sh: $tool is missing" >&2; exit 1; }
done

dir=${BENCH_FILES_DIR:-}
if [[ -z $dir ]]; then
	dir=${TMPDIR:-/tmp}
	[[ -d /dev/shm && -w /dev/shm ]] && dir=/dev/shm
fi
work=$(mktemp -d "$dir/envd-bench-files.XXXXXX")
chmod 777 "$work"
floor_pid=
cleanup() {
	stop_envd
	if [[ -n $floor_pid ]]; then
		kill "$floor_pid" 2>/dev/null || true
		wait "$floor_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/tcpfloor" ./bench/tcpfloor
go build -o "$work/httpfloor" ./bench/httpfloor
start_envd "$work/envd.log" -no-jupyter
"$work/httpfloor" >"$work/httpfloor.url" 2>"$work/httpfloor.log" &
floor_pid=$!
for _ in $(seq 100); do [[ -s $work/httpfloor.url ]] && break; sleep 0.05; done
floor_url=$(head -1 "$work/httpfloor.url")
[[ -n $floor_url ]] || { echo "files.sh: httpfloor did not start" >&2; cat "$work/httpfloor.log" >&2; exit 1; }

src=$work/src.bin
head -c "$((size_mib << 20))" /dev/urandom >"$src"
cat "$src" >/dev/null # in the page cache, for every contender alike
bytes=$(stat -c %s "$src")

# The transfers, each given the server's base URL and the file to write:
# the same curl command line for envd and net/http.
download() { curl -fsS -o "$2" "$1/files?path=$src"; }
upload() {
	curl -fsS -o /dev/null -H 'Expect:' -H 'Content-Type: application/octet-stream' \
		-X POST -T "$src" "$1/files?path=$2"
}
multipart() { curl -fsS -o /dev/null -H 'Expect:' -F "file=@$src" "$1/files?path=$2"; }
copy() { cp "$src" "$1"; }
floor() { "$work/tcpfloor" "$src" "$1" >/dev/null; }

declare -A best=()
# timed NAME CMD ARG... FILE: remove FILE and write back every dirty page
# (the previous transfers' 1 GiB files), then time CMD ARG... FILE, which
# writes FILE; keep its time in best[NAME] if the shortest.
timed() {
	local name=$1 file=${*: -1} t0 t1 d
	shift
	rm -f "$file"
	sync
	t0=$(now)
	"$@"
	t1=$(now)
	d=$(elapsed "$t0" "$t1")
	if [[ -z ${best[$name]:-} ]] || awk -v d="$d" -v b="${best[$name]}" 'BEGIN { exit !(d < b) }'; then
		best[$name]=$d
	fi
}

for _ in $(seq "$runs"); do
	timed cp copy "$work/cp.bin"
	timed tcp floor "$work/floor.bin"
	for t in download upload multipart; do
		timed "$t-envd" "$t" "$envd_url" "$work/$t-envd.bin"
		timed "$t-nethttp" "$t" "$floor_url" "$work/$t-nethttp.bin"
	done
done
for f in floor.bin {download,upload,multipart}-{envd,nethttp}.bin; do
	cmp -s "$src" "$work/$f" || { echo "files.sh: $f differs from the source" >&2; exit 1; }
done
hwm=$(awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$envd_pid/status")

rate() { awk -v b="$bytes" -v t="$1" 'BEGIN { printf "%.0f MB/s", b / t / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "files: $((bytes >> 20)) MiB, best of $runs interleaved runs, in $work (on $(df --output=fstype "$work" | tail -1))"
printf '%-20s %8s %9s  %-28s %s\n' contender seconds rate 'envd over net/http, tcp' 'over cp'
for c in cp tcp {download,upload,multipart}-{nethttp,envd}; do
	t=${best[$c]}
	extra=
	if [[ $c == *-envd ]]; then
		extra="$(ratio "$t" "${best[${c%-envd}-nethttp]}")x  $(ratio "$t" "${best[tcp]}")x"
	fi
	printf '%-20s %8.3f %9s  %-28s %sx\n' "$c" "$t" "$(rate "$t")" "$extra" "$(ratio "$t" "${best[cp]}")"
done
echo "envd peak RSS (VmHWM): $hwm MiB"
for t in download upload multipart; do
	row "files-$t" "$(rate "${best[$t-envd]}")" "$(rate "${best[$t-nethttp]}")" "$(ratio "${best[$t-envd]}" "${best[$t-nethttp]}")"
	row "files-$t-tcp" "$(rate "${best[$t-envd]}")" "$(rate "${best[tcp]}")" "$(ratio "${best[$t-envd]}" "${best[tcp]}")"
done
