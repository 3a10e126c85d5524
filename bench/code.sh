#!/usr/bin/env bash
# Code execution through the @e2b/code-interpreter SDK against envd with
# Jupyter, versus kernels measured directly with Debian's jupyter_client, in
# the same run (see bench/code.mjs): runCode('x=1') vs a plain python3 kernel
# (and vs envd's own kernel), createCodeContext() with envd's prestarted
# Python kernel and without one vs a KernelManager start. Prints each pair of
# medians, their ratio, and ROW lines for bench/run.sh's table.
#
#   bench/code.sh                  # builds bin/envd
#   ENVD_BIN=/path/envd BENCH_CODE_RUNS=500 bench/code.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
if [[ -z ${ENVD_BIN:-} ]]; then
	make -s build
	export ENVD_BIN=$PWD/bin/envd
fi
/usr/bin/python3 -c 'import jupyter_client' 2>/dev/null || {
	echo "code.sh: Debian's python3-jupyter-client is missing (scripts/install-deps.sh)" >&2
	exit 1
}
exec node bench/code.mjs "${BENCH_CODE_RUNS:-200}" "${BENCH_CODE_STARTS:-15}"
