#!/usr/bin/env bash
# Runs every benchmark; each prints envd's figure, an in-run baseline doing the
# same work directly, and the ratio. Not a test: no thresholds.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
make -s build
export ENVD_BIN=$PWD/bin/envd
echo "== commands.run('true') through the SDK vs spawning bash directly"
node bench/sdk-commands.mjs "${BENCH_RUNS:-200}"
echo "== 1 GiB of stdout through envd (binary Connect codec) vs a bare relay (pipe into loopback TCP); cost/relay goal <= 1.25"
go test -run '^$' -bench BenchmarkStreamThroughput -benchtime 3x ./internal/process/
for b in bench/files.sh bench/code.sh; do
	if [[ -x $b ]]; then echo "== $b"; "$b"; fi
done
