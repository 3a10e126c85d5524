// make soak: a mixed workload through the unmodified e2b SDKs and envctl
// against a real envd this process starts, for SOAK_DURATION, while it
// samples envd's and its Jupyter server's resources. It fails (exit 1) on
// any failed operation, any stall (an operation past its deadline), or
// growth between the warm baseline and the end. soak/README.md says how.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { pathToFileURL } from 'node:url'
import {
  REPO_ROOT,
  children,
  descendantsOf,
  fdKinds,
  fmtBytes,
  freePort,
  jupyterPid,
  kernelPids,
  parseDuration,
  procStats,
  processTable,
  signalChild,
  sleep,
  start,
} from './lib.mjs'
import { KINDS, SCHEDULE } from './ops.mjs'

// ---- configuration --------------------------------------------------------------

const env = process.env
const cfg = {
  duration: parseDuration(env.SOAK_DURATION || '10m'),
  workers: Number(env.SOAK_WORKERS || 3),
  sampleEvery: parseDuration(env.SOAK_SAMPLE_EVERY || '5s'),
  // How long the workload rests, its objects closed, before the figures at
  // rest are read: more than envd keeps an ended process's output (30 s)
  // and a finished execution (1 min).
  settle: parseDuration(env.SOAK_SETTLE || '65s'),
  // The longest the end waits for the counts to come back to the baseline.
  finalSettle: parseDuration(env.SOAK_FINAL_SETTLE || '90s'),
  json: path.resolve(REPO_ROOT, env.SOAK_JSON || 'soak/last.json'),
  envd: path.resolve(REPO_ROOT, env.ENVD_BIN || 'bin/envd'),
  envctl: path.resolve(REPO_ROOT, env.ENVCTL_BIN || 'bin/envctl'),
  keep: ['1', 'true'].includes(env.SOAK_KEEP ?? ''),
}

// Limits of the end against the warm baseline, both at rest (README.md
// says why these).
const LIMITS = {
  envdFds: 8,
  jupyterFds: 8,
  goroutines: 10,
  kernels: 0,
  contexts: 0,
  processes: 0,
  descendants: 0,
  envdHeapMiB: 8, // envd's live heap after a forced GC: + the larger of this and heapPct
  heapPct: 0.25,
  envdRssMiB: 16, // envd's RSS, its free pages returned: + the larger of this and rssPct
  rssPct: 0.25,
  jupyterRssMiB: 32, // the Jupyter server's RSS: + the larger of this and rssPct
}

// ---- envd -----------------------------------------------------------------------

const runDir = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-soak-'))
fs.chmodSync(runDir, 0o755)
const localDir = path.join(runDir, 'local')
const scratch = path.join(runDir, 'sbx') // the sandbox's side: the default user's
fs.mkdirSync(localDir)
fs.mkdirSync(scratch)
fs.mkdirSync(path.join(runDir, 'run'))
const uid = Number(execFileSync('id', ['-u', 'user']).toString())
const gid = Number(execFileSync('id', ['-g', 'user']).toString())
fs.chownSync(scratch, uid, gid)
const logPath = path.join(runDir, 'envd.log')
const cgroupTree = `envd-soak-${process.pid}`

const [port, codePort, debugPort] = [await freePort(), await freePort(), await freePort()]
const url = `http://127.0.0.1:${port}`
const codeUrl = `http://127.0.0.1:${codePort}`
const debugUrl = `http://127.0.0.1:${debugPort}`
const envdArgs = [
  '-host', '127.0.0.1', '-port', String(port), '-code-port', String(codePort),
  '-debug-addr', `127.0.0.1:${debugPort}`,
  '-forward-ports=false', '-mmds-url', 'off', '-run-dir', path.join(runDir, 'run'),
  '-cgroup-tree', cgroupTree, '-log-level', env.SOAK_LOG_LEVEL || 'info',
]

let envd // { child, exited }
const t0 = Date.now()
const elapsed = () => (Date.now() - t0) / 1000
const say = (msg) => console.log(`[${elapsed().toFixed(0).padStart(5)}s] ${msg}`)

async function startEnvd() {
  const logFd = fs.openSync(logPath, 'a')
  envd = start(cfg.envd, envdArgs, { stdio: ['ignore', logFd, logFd] })
  fs.closeSync(logFd)
  const deadline = Date.now() + 120e3
  let last = ''
  while (Date.now() < deadline) {
    const early = await Promise.race([envd.exited, sleep(0)])
    if (early) throw new Error(`envd exited during startup (code ${early.code}, signal ${early.signal}); log: ${logPath}`)
    try {
      const res = await fetch(`${codeUrl}/health`, { signal: AbortSignal.timeout(2000) })
      if (res.status === 200) return
      last = `${res.status} ${await res.text()}`
    } catch (e) {
      last = e.cause?.code ?? e.message
    }
    await sleep(200)
  }
  throw new Error(`envd's code port not healthy after 120 s (last: ${last}); log: ${logPath}`)
}

/** SIGTERM envd and wait; returns a problem string, or null on a clean exit 0. */
let envdStopped = false
async function stopEnvd() {
  if (!envd || envdStopped) return null
  envdStopped = true
  const done = await Promise.race([envd.exited, sleep(0)])
  if (done) return `envd died during the soak (code ${done.code}, signal ${done.signal})`
  signalChild(envd.child, 'SIGTERM')
  const r = await Promise.race([envd.exited, sleep(20e3)])
  if (!r) {
    // What our envd started (Jupyter, kernels, commands) goes with it.
    const left = descendantsOf(processTable(), envd.child.pid)
    signalChild(envd.child, 'SIGKILL')
    await envd.exited
    for (const pid of left) {
      try {
        process.kill(pid, 'SIGKILL')
      } catch {}
    }
    return `envd did not exit within 20 s of SIGTERM (killed, with its ${left.length} descendants)`
  }
  if (r.code !== 0) return `envd exited with code ${r.code}, signal ${r.signal} after SIGTERM`
  return null
}

// ---- samples --------------------------------------------------------------------

const samples = []

async function goroutines() {
  const res = await fetch(`${debugUrl}/debug/pprof/goroutine?debug=1`, { signal: AbortSignal.timeout(5000) })
  const m = /^goroutine profile: total (\d+)/.exec(await res.text())
  return m ? Number(m[1]) : NaN
}

/**
 * envd's runtime.MemStats, as /debug/pprof/heap?debug=1 prints them (after
 * a forced GC with gc): { HeapAlloc, HeapInuse, HeapIdle, HeapReleased, ... }.
 */
async function memStats(gc = true) {
  const res = await fetch(`${debugUrl}/debug/pprof/heap?debug=1${gc ? '&gc=1' : ''}`, { signal: AbortSignal.timeout(10000) })
  const text = await res.text()
  const out = {}
  for (const m of text.matchAll(/^# (\w+) = (\d+)$/gm)) out[m[1]] = Number(m[2])
  return out
}

/** envd's live heap after a forced GC (MemStats' HeapAlloc), in bytes. */
async function liveHeap() {
  return (await memStats(true)).HeapAlloc ?? NaN
}

async function getJSON(u, init) {
  const res = await fetch(u, { ...init, signal: AbortSignal.timeout(5000) })
  if (!res.ok) throw new Error(`${u}: ${res.status}`)
  return res.json()
}

/** One sample of everything watched. */
async function sample(phase, { heap = false } = {}) {
  const table = processTable()
  const pid = envd.child.pid
  const jp = jupyterPid(table, pid)
  const s = {
    t: Number(elapsed().toFixed(1)),
    phase,
    envd: procStats(pid),
    jupyter: jp ? { pid: jp, ...procStats(jp) } : null,
    kernels: kernelPids(table, jp).length,
    descendants: descendantsOf(table, pid).length,
  }
  const errs = []
  await Promise.all([
    goroutines().then((n) => (s.goroutines = n), (e) => errs.push(`goroutines: ${e.message}`)),
    getJSON(`${codeUrl}/contexts`).then((l) => (s.contexts = l.length), (e) => errs.push(`contexts: ${e.message}`)),
    getJSON(`${url}/process.Process/List`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }).then(
      (l) => (s.processes = (l.processes ?? []).length),
      (e) => errs.push(`processes: ${e.message}`),
    ),
    heap
      ? memStats(true).then(
          (m) => {
            s.heap = m.HeapAlloc
            s.memstats = Object.fromEntries(['Sys', 'HeapSys', 'HeapInuse', 'HeapIdle', 'HeapReleased', 'StackInuse', 'NumGC'].map((k) => [k, m[k]]))
          },
          (e) => errs.push(`heap: ${e.message}`),
        )
      : null,
  ])
  if (heap) {
    // At rest: what envd's and Jupyter's descriptors are, for a leak's report.
    s.envd_fd_kinds = fdKinds(pid)
    if (jp) s.jupyter_fd_kinds = fdKinds(jp)
  }
  if (errs.length) s.errors = errs
  samples.push(s)
  return s
}

// ---- the workload ---------------------------------------------------------------

const stats = new Map() // kind -> { lat: [], fails: [] }
const failures = [] // { t, op, stall, message }
const live = { contexts: new Set() } // what ops made and have not closed
const pending = new Set() // ops that stalled and have not ended yet
let started = 0
let seq = 0 // next schedule slot
const rotation = new Map() // kind -> next language index
const kindRuns = new Map() // kind -> count, for size rotations

function nextOp() {
  const kind = SCHEDULE[seq++ % SCHEDULE.length]
  const k = KINDS[kind]
  let name = kind
  let lang
  if (k.langs) {
    const i = rotation.get(kind) ?? 0
    rotation.set(kind, i + 1)
    lang = k.langs[i % k.langs.length]
    name = `${kind}.${lang}`
  }
  const n = kindRuns.get(kind) ?? 0
  kindRuns.set(kind, n + 1)
  return { kind, name, lang, n, ...k }
}

function record(name, ms, failure) {
  if (!stats.has(name)) stats.set(name, { lat: [], fails: 0, stalls: 0 })
  const st = stats.get(name)
  st.lat.push(ms)
  if (failure) {
    if (failure.stall) st.stalls++
    else st.fails++
    failures.push({ t: Number(elapsed().toFixed(1)), op: name, ...failure })
    say(`${failure.stall ? 'STALL' : 'FAIL'} ${name}: ${failure.message}`)
  }
}

let sdk // { sbx, code }

async function runOp(entry) {
  const id = ++started
  const cleanups = []
  let step = 'starting'
  const op = { id, n: entry.n, step: (s) => (step = s), defer: (fn) => cleanups.push(fn) }
  const ctx = {
    sbx: sdk.sbx,
    code: sdk.code,
    envdPid: envd.child.pid,
    scratch,
    localDir,
    live,
    envctlBin: cfg.envctl,
    envctlEnv: { ...process.env, ENVCTL_ADDR: url },
  }
  const cleanup = async () => {
    for (const fn of cleanups.reverse()) {
      try {
        await Promise.race([fn(), sleep(15e3)])
      } catch {}
    }
  }
  const t = performance.now()
  const p = entry.lang ? entry.fn(ctx, op, entry.lang) : entry.fn(ctx, op)
  let timer
  const outcome = await Promise.race([
    p.then(
      () => ({ ok: true }),
      (e) => ({ ok: false, e }),
    ),
    new Promise((resolve) => (timer = setTimeout(() => resolve({ stall: true }), entry.deadline))),
  ])
  clearTimeout(timer)
  const ms = performance.now() - t
  if (outcome.stall) {
    record(entry.name, ms, { stall: true, message: `still running after its ${entry.deadline / 1000} s deadline, at: ${step}` })
    const rest = p.catch(() => {}).finally(() => pending.delete(rest))
    pending.add(rest)
    await cleanup()
    return
  }
  if (!outcome.ok) {
    const e = outcome.e
    const msg = `${e?.name && e.name !== 'SoakError' ? `${e.name}: ` : ''}${e?.message ?? e} (at: ${step})`
    record(entry.name, ms, { message: msg.slice(0, 1500) })
  } else {
    record(entry.name, ms, null)
  }
  await cleanup()
}

let paused = false
let stopping = false
let idle = 0
let wake = () => {}

async function worker() {
  while (!stopping) {
    if (paused) {
      idle++
      await new Promise((resolve) => {
        const prev = wake
        wake = () => {
          prev()
          resolve()
        }
      })
      idle--
      continue
    }
    await runOp(nextOp())
  }
  idle++
}

async function waitIdle() {
  while (idle < cfg.workers) await sleep(100)
}

/**
 * Pause the workload (each worker ends its op), close what ops left open,
 * and sample every second while envd settles: at least minMs, then until
 * `until(sample)` holds, at most maxMs. Then the figures at rest: forced
 * GCs (the second frees what the first left to finalizers and sync.Pool's
 * victim cache) until Go's scavenger has returned the freed pages to the
 * system, and a sample with the live heap. Returns that last sample.
 */
async function quiesce(phase, minMs, maxMs, until) {
  paused = true
  await waitIdle()
  await closeLeftovers()
  const began = Date.now()
  for (;;) {
    await sleep(1000)
    const s = await sample(phase)
    const waited = Date.now() - began
    if (waited >= maxMs || (waited >= minMs && (!until || until(s)))) break
  }
  // Two GCs, then until Go's scavenger has returned the free pages (at
  // most 4 MiB idle and not yet released), another GC every 10 s, for at
  // most 60 s.
  await liveHeap().catch(() => {})
  await sleep(1000)
  const scavenged = Date.now() + 60e3
  for (let i = 0; Date.now() < scavenged; i++) {
    const m = await memStats(i % 10 === 0).catch(() => ({}))
    if (i > 0 && m.HeapIdle - m.HeapReleased <= 4 * 1048576) break
    await sleep(1000)
  }
  return sample(phase, { heap: true })
}

async function closeLeftovers() {
  for (const id of [...live.contexts]) {
    await sdk.code.removeCodeContext(id).catch(() => {})
    live.contexts.delete(id)
  }
}

// ---- the run ----------------------------------------------------------------------

let interrupted = false
async function cleanupAll() {
  const problem = await stopEnvd().catch((e) => String(e))
  for (const c of [...children.values()]) signalChild(c, 'SIGKILL')
  return problem
}
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, async () => {
    if (interrupted) return
    interrupted = true
    console.error(`\n${sig}: stopping envd and what the soak started`)
    await cleanupAll()
    leftoverCgroups()
    console.error(`envd's log and the run's files are in ${runDir}`)
    process.exit(130)
  })
}

/**
 * The soak's cgroup tree (-cgroup-tree, named after this process) if envd
 * left it: each directory found is removed, deepest first (a cgroup with
 * no process in it can be), and named.
 */
function leftoverCgroups() {
  const left = []
  let lines = []
  try {
    lines = fs.readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n')
  } catch {}
  const removeTree = (dir) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeTree(path.join(dir, e.name))
    try {
      fs.rmdirSync(dir)
    } catch {}
  }
  for (const line of lines) {
    const [, ctrl, rel] = line.split(':')
    const mounts = ctrl === '' ? ['/sys/fs/cgroup', '/sys/fs/cgroup/unified'] : [`/sys/fs/cgroup/${ctrl.replace(/^name=/, '')}`]
    for (const m of mounts) {
      const dir = path.join(m, rel, cgroupTree)
      if (!fs.existsSync(dir)) continue
      left.push(dir)
      removeTree(dir)
    }
  }
  return left
}

function pct(sorted, p) {
  if (!sorted.length) return NaN
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]
}

async function main() {
  for (const bin of [cfg.envd, cfg.envctl]) fs.accessSync(bin, fs.constants.X_OK)
  say(`envd ${cfg.envd} on ${url} (code ${codeUrl}, pprof ${debugUrl}); run dir ${runDir}`)
  say(`duration ${cfg.duration / 1000} s, ${cfg.workers} workers, a sample every ${cfg.sampleEvery / 1000} s`)
  await startEnvd()
  say(`envd ready (pid ${envd.child.pid})`)

  process.env.E2B_DEBUG = 'true'
  const nm = path.join(REPO_ROOT, 'test/compat/node_modules')
  const e2b = await import(pathToFileURL(path.join(nm, 'e2b/dist/index.mjs')))
  const ci = await import(pathToFileURL(path.join(nm, '@e2b/code-interpreter/dist/index.mjs')))
  // Commands, files and PTYs on the envd port, code on the code port, as
  // in a sandbox.
  sdk = {
    sbx: await e2b.Sandbox.create({ debug: true, sandboxUrl: url }),
    code: await ci.Sandbox.create({ debug: true, sandboxUrl: codeUrl }),
  }
  const first = await sample('start', { heap: true })
  say(`start: envd ${fmtBytes(first.envd.rss)} ${first.envd.fds} fds ${first.goroutines} goroutines; jupyter ${fmtBytes(first.jupyter?.rss)}; ${first.kernels} kernels, ${first.contexts} contexts`)

  const sampler = setInterval(() => sample(paused ? 'paused' : 'load').catch(() => {}), cfg.sampleEvery)
  let active = 0 // workload time so far, pauses left out
  let since = Date.now()
  const workers = Array.from({ length: cfg.workers }, () => worker())

  // Warm-up: the first 10% of the duration, and at least one full cycle
  // of the schedule started (at most 30% of the duration).
  const warm = 0.1 * cfg.duration
  while (!(Date.now() - since >= warm && started >= SCHEDULE.length) && Date.now() - since < 0.3 * cfg.duration) await sleep(250)
  active += Date.now() - since
  say(`warm after ${(active / 1000).toFixed(0)} s and ${started} ops: pausing for the baseline (${cfg.settle / 1000} s)`)
  const baseline = await quiesce('baseline', cfg.settle, cfg.settle)
  say(`baseline: envd ${fmtBytes(baseline.envd.rss)} (heap ${fmtBytes(baseline.heap)}) ${baseline.envd.fds} fds ${baseline.goroutines} goroutines; jupyter ${fmtBytes(baseline.jupyter?.rss)} ${baseline.jupyter?.fds} fds; ${baseline.kernels} kernels, ${baseline.contexts} contexts, ${baseline.processes} processes`)
  const loadStart = elapsed()
  paused = false
  wake()
  wake = () => {}
  since = Date.now()
  let lastReport = Date.now()
  while (active + (Date.now() - since) < cfg.duration && !interrupted) {
    await sleep(500)
    if (Date.now() - lastReport > 30e3) {
      lastReport = Date.now()
      const s = samples.at(-1)
      const ops = [...stats.values()].reduce((a, st) => a + st.lat.length, 0)
      say(`${ops} ops, ${failures.length} failed; envd ${fmtBytes(s.envd?.rss)} ${s.envd?.fds} fds ${s.goroutines} goroutines; jupyter ${fmtBytes(s.jupyter?.rss)}; ${s.kernels} kernels, ${s.contexts} contexts`)
    }
  }
  const loadEnd = elapsed()
  say('duration reached: stopping the workers')
  stopping = true
  paused = true
  wake()
  await Promise.all(workers)
  if (pending.size) {
    say(`waiting for ${pending.size} stalled ops to end (at most 60 s)`)
    await Promise.race([Promise.all([...pending]), sleep(60e3)])
  }
  clearInterval(sampler)
  say(`settling (${cfg.settle / 1000} s, at most ${cfg.finalSettle / 1000} s until the counts are back) for the final figures`)
  // The counts, not the memory: that is read after the forced GCs.
  const within = (s) => checks(baseline, s).every((c) => c.ok || /RSS/.test(c.name))
  const final = await quiesce('final', cfg.settle, Math.max(cfg.settle, cfg.finalSettle), within)

  // ---- the report ----
  const problems = []
  const envdProblem = await stopEnvd()
  if (envdProblem) problems.push(envdProblem)
  const leftCg = leftoverCgroups()
  if (leftCg.length) problems.push(`envd left its cgroup tree (removed now): ${leftCg.join(', ')}`)
  const ops = report(baseline, final, loadStart, loadEnd)
  const resources = ops.resources
  const missing = Object.keys(KINDS).filter((k) => ![...stats.keys()].some((n) => n === k || n.startsWith(`${k}.`)))
  if (missing.length) problems.push(`operation kinds never run (a longer SOAK_DURATION runs them): ${missing.join(', ')}`)
  if (failures.length) problems.push(`${failures.filter((f) => !f.stall).length} failed operations, ${failures.filter((f) => f.stall).length} stalls`)
  for (const r of resources) if (!r.ok) problems.push(`${r.name}: ${r.why}`)
  for (const [name, key] of [['envd fds', 'envd_fd_kinds'], ['jupyter fds', 'jupyter_fd_kinds']]) {
    if (!resources.find((r) => r.name === name).ok) console.log(`${name} by kind: baseline ${JSON.stringify(baseline[key])}, last ${JSON.stringify(final[key])}`)
  }

  const out = {
    when: new Date(t0).toISOString(),
    duration_s: cfg.duration / 1000,
    workers: cfg.workers,
    host: { cores: os.cpus().length, loadavg_end: os.loadavg() },
    envd_args: envdArgs,
    envd_version: execFileSync(cfg.envd, ['-version']).toString().trim(),
    load_window_s: [loadStart, loadEnd],
    ops: ops.rows,
    resources,
    failures,
    problems,
    samples,
  }
  fs.writeFileSync(cfg.json, JSON.stringify(out, null, 1) + '\n')
  console.log(`\nfigures in ${path.relative(process.cwd(), cfg.json)}`)
  if (problems.length) {
    console.log(`\nFAIL:\n  ${problems.join('\n  ')}`)
    console.log(`envd's log and the run's files are kept in ${runDir}`)
    return 1
  }
  console.log('\nPASS')
  if (cfg.keep) console.log(`run dir kept: ${runDir}`)
  else fs.rmSync(runDir, { recursive: true, force: true })
  return 0
}

/** Each gated figure of `s` against the baseline: { name, base, value, limit, ok }. */
function checks(base, s) {
  const c = (name, b, v, slack) => ({ name, base: b, value: v, limit: b + slack, ok: Number.isFinite(v) && v <= b + slack })
  const m = (name, b, v, fixedMiB, pct) => {
    const limit = b + Math.max(fixedMiB * 1048576, pct * b)
    return { name, base: b, value: v, limit, ok: Number.isFinite(v) && v <= limit }
  }
  return [
    m('envd RSS', base.envd.rss, s.envd?.rss, LIMITS.envdRssMiB, LIMITS.rssPct),
    c('envd fds', base.envd.fds, s.envd?.fds, LIMITS.envdFds),
    c('goroutines', base.goroutines, s.goroutines, LIMITS.goroutines),
    m('jupyter RSS', base.jupyter?.rss, s.jupyter?.rss, LIMITS.jupyterRssMiB, LIMITS.rssPct),
    c('jupyter fds', base.jupyter?.fds, s.jupyter?.fds, LIMITS.jupyterFds),
    c('kernels', base.kernels, s.kernels, LIMITS.kernels),
    c('contexts', base.contexts, s.contexts, LIMITS.contexts),
    c('processes', base.processes, s.processes, LIMITS.processes),
    c('descendants', base.descendants, s.descendants, LIMITS.descendants),
  ]
}

function report(baseline, final, loadStart, loadEnd) {
  // Operations.
  const rows = [...stats.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, st]) => {
      const sorted = [...st.lat].sort((a, b) => a - b)
      return { op: name, count: sorted.length, failed: st.fails, stalled: st.stalls, p50_ms: Math.round(pct(sorted, 50)), p99_ms: Math.round(pct(sorted, 99)), max_ms: Math.round(sorted.at(-1)) }
    })
  const all = [...stats.values()].flatMap((st) => st.lat).sort((a, b) => a - b)
  const total = { op: 'all', count: all.length, failed: rows.reduce((a, r) => a + r.failed, 0), stalled: rows.reduce((a, r) => a + r.stalled, 0), p50_ms: Math.round(pct(all, 50)), p99_ms: Math.round(pct(all, 99)), max_ms: Math.round(all.at(-1)) }
  const w = Math.max(...rows.map((r) => r.op.length), 10)
  console.log(`\n${'operation'.padEnd(w)}  ${['count', 'failed', 'stalled', 'p50 ms', 'p99 ms', 'max ms'].map((h) => h.padStart(8)).join('')}`)
  for (const r of [...rows, total]) {
    console.log(`${r.op.padEnd(w)}  ${[r.count, r.failed, r.stalled, r.p50_ms, r.p99_ms, r.max_ms].map((v) => String(v).padStart(8)).join('')}`)
  }
  if (failures.length) {
    console.log('\nfailures (first 20):')
    for (const f of failures.slice(0, 20)) console.log(`  [${f.t}s] ${f.stall ? 'STALL' : 'FAIL'} ${f.op}: ${f.message}`)
  }

  // Resources: during the load, the warm window (the load's first 10%)
  // against the last 10%, by their floors; at rest, the baseline against
  // the end.
  const load = samples.filter((s) => s.phase === 'load' && s.t >= loadStart && s.t <= loadEnd)
  const span = loadEnd - loadStart
  const early = load.filter((s) => s.t <= loadStart + 0.1 * span)
  const late = load.filter((s) => s.t >= loadEnd - 0.1 * span)
  const get = {
    'envd RSS': (s) => s.envd?.rss,
    'envd RSS anon': (s) => s.envd?.rssAnon,
    'envd heap (after GC)': (s) => s.heap,
    'envd fds': (s) => s.envd?.fds,
    'envd threads': (s) => s.envd?.threads,
    goroutines: (s) => s.goroutines,
    'jupyter RSS': (s) => s.jupyter?.rss,
    'jupyter fds': (s) => s.jupyter?.fds,
    kernels: (s) => s.kernels,
    contexts: (s) => s.contexts,
    processes: (s) => s.processes,
    descendants: (s) => s.descendants,
  }
  const isBytes = (n) => /RSS|heap/.test(n)
  const gated = Object.fromEntries(checks(baseline, final).map((c) => [c.name, c]))
  const mib = 1048576
  const memLimit = (b, fixed, pct) => b + Math.max(fixed * mib, pct * b)
  const resources = Object.entries(get).map(([name, f]) => {
    const vals = samples.map(f).filter(Number.isFinite)
    const floor = (xs) => Math.min(...xs.map(f).filter(Number.isFinite))
    const r = {
      name,
      first: f(samples[0]),
      baseline: f(baseline),
      last: f(final),
      max: Math.max(...vals),
      growth: f(final) - f(baseline),
      load_early_floor: early.length ? floor(early) : null,
      load_late_floor: late.length ? floor(late) : null,
      limit: null,
      ok: true,
    }
    if (gated[name]) {
      r.limit = gated[name].limit
      r.ok = gated[name].ok
    } else if (name === 'envd heap (after GC)') {
      r.limit = memLimit(r.baseline, LIMITS.envdHeapMiB, LIMITS.heapPct)
      r.ok = r.last <= r.limit
    }
    if (!r.ok && !r.why) r.why = `${isBytes(name) ? fmtBytes(r.last) : r.last} at the end, limit ${isBytes(name) ? fmtBytes(r.limit) : r.limit} (baseline ${isBytes(name) ? fmtBytes(r.baseline) : r.baseline})`
    return r
  })
  const fmt = (name, v) => (v === null || v === undefined || !Number.isFinite(v) ? '-' : isBytes(name) ? fmtBytes(v) : String(v))
  const rw = Math.max(...resources.map((r) => r.name.length))
  console.log(`\n${'resource'.padEnd(rw)}  ${['first', 'baseline', 'last', 'max', 'growth', 'load 10%', 'load 90%', 'limit'].map((h) => h.padStart(9)).join('')}  verdict`)
  for (const r of resources) {
    const growth = isBytes(r.name) ? `${r.growth >= 0 ? '+' : ''}${fmtBytes(r.growth)}` : `${r.growth >= 0 ? '+' : ''}${r.growth}`
    console.log(
      `${r.name.padEnd(rw)}  ${[fmt(r.name, r.first), fmt(r.name, r.baseline), fmt(r.name, r.last), fmt(r.name, r.max), growth, fmt(r.name, r.load_early_floor), fmt(r.name, r.load_late_floor), fmt(r.name, r.limit)]
        .map((v) => v.padStart(9))
        .join('')}  ${r.limit === null ? '' : r.ok ? 'ok' : 'GREW'}`,
    )
  }
  console.log(`(baseline: at rest after the warm-up, ${baseline.t} s; last: at rest after the load, ${final.t} s; load 10%/90%: the floor of the load's first and last 10%)`)
  return { rows: [...rows, total], resources }
}

let code = 1
try {
  code = await main()
} catch (e) {
  console.error(`soak: ${e.stack ?? e}`)
  console.error(`envd's log and the run's files are in ${runDir}`)
}
await cleanupAll()
process.exit(code)
