// Figures the Node benchmarks print: medians, the 99th percentile, elapsed
// milliseconds, and the ROW line bench/run.sh turns into its table.

const sorted = (xs) => [...xs].sort((a, b) => a - b)

export const median = (xs) => {
  const s = sorted(xs)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}

// p99 by the nearest rank.
export const p99 = (xs) => sorted(xs)[Math.max(0, Math.ceil(0.99 * xs.length) - 1)]

// ms is the time since t0 (process.hrtime.bigint()), in milliseconds.
export const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6

export const fmt = (x) => x.toFixed(2)
