# Sourced by the shell benchmarks (bench/files.sh, bench/stream.sh,
# bench/zygote.sh).

# now prints the wall clock in seconds, with nanoseconds.
now() { date +%s.%N; }

# elapsed T0 T1 prints T1 - T0 in seconds.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }

# median X... prints the median of the numbers.
median() {
	printf '%s\n' "$@" | sort -g | awk '{ x[NR] = $1 } END { if (NR % 2) printf "%.4f", x[(NR + 1) / 2]; else printf "%.4f", (x[NR / 2] + x[NR / 2 + 1]) / 2 }'
}

# minimum X... prints the smallest of the numbers.
minimum() { printf '%s\n' "$@" | sort -g | head -1; }

# row KEY ENVD BASELINE RATIO prints one machine-readable line for
# bench/run.sh's table: KEY names a row of the table there (which holds its
# label and goal), ENVD and BASELINE are the two figures as shown (units
# included), RATIO is envd's cost over the baseline's (lower is better).
row() { printf 'ROW\t%s\t%s\t%s\t%s\n' "$@"; }

# free_port prints a port that was free on 127.0.0.1 a moment ago.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_envd LOG ARGS...: run $ENVD_BIN on a free loopback port (no Jupyter
# unless ARGS say otherwise), wait for its /health; sets envd_pid and
# envd_url. stop_envd ends it.
start_envd() {
	local log=$1 port
	shift
	port=$(free_port)
	"$ENVD_BIN" -host 127.0.0.1 -forward-ports=false -mmds-url off -port "$port" -code-port 0 -log-level warn "$@" >"$log" 2>&1 &
	envd_pid=$!
	envd_url=http://127.0.0.1:$port
	for _ in $(seq 400); do
		curl -fsS -o /dev/null "$envd_url/health" 2>/dev/null && return 0
		kill -0 "$envd_pid" 2>/dev/null || break
		sleep 0.05
	done
	echo "envd did not answer $envd_url/health; its log:" >&2
	cat "$log" >&2
	return 1
}

stop_envd() {
	if [[ -n ${envd_pid:-} ]]; then
		kill -TERM "$envd_pid" 2>/dev/null || true
		wait "$envd_pid" 2>/dev/null || true
		envd_pid=
	fi
}
