// Benchmark: envd start to the first runCode result, versus starting what it
// starts directly, in the same run:
//
//   - envd: from the exec of bin/envd (with Jupyter, default prestarted
//     kernels) to the first successful runCode('1') through the unmodified
//     @e2b/code-interpreter SDK: poll GET /health (every 5 ms) until it
//     answers, then runCode (again every 5 ms while it fails). Each run is a
//     fresh envd; the previous one is stopped (SIGTERM, waited for) first.
//   - baseline: the Jupyter server alone, started with the command line,
//     environment, working directory, user and config files envd gave its
//     own (read from /proc and envd's config directory during the warm-up
//     run; but python3 -m jupyter_server for envd's boot file, and without
//     envd's early kernel), from its exec until GET /api/status answers 200 (polled every
//     5 ms), plus one plain python3 kernel's start (jupyter_client's
//     KernelManager, Debian's kernelspec, no envd startup files: start to
//     kernel_info reply, bench/code_kernel.py), measured directly while
//     that server runs. The two one after the other, as anyone starting
//     them would; envd starts the default context's kernel beside the
//     server (the early kernel), which is its own doing to measure.
//
// One warm-up run of each, then BENCH_START_RUNS (default 5) runs of each,
// interleaved; ratio of medians. Prints a ROW line for bench/run.sh's table
// (start).
//
//   node bench/start.mjs [runs]      (ENVD_BIN to use a built binary)
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { envdBinary, freePort, sleep } from '../test/compat/harness.mjs'
import { kernelHelper, plainKernelEnv } from './kernel-helper.mjs'
import { fmt, median, ms } from './stats.mjs'

const runs = Number(process.argv[2] || 5)
const require = createRequire(new URL('../test/compat/package.json', import.meta.url))
const { Sandbox } = await import(require.resolve('@e2b/code-interpreter'))

const POLL_MS = 5
const DEADLINE_MS = 120000

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-bench-start-'))
fs.chmodSync(work, 0o755)

// exitOf resolves once child has exited.
const exitOf = (child) =>
  new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve()
    else child.on('exit', () => resolve())
  })

// stop ends child (and, with group, its process group) with SIGTERM, then
// SIGKILL after 15 s.
async function stop(child, group = false) {
  const exited = exitOf(child)
  const kill = (sig) => {
    try {
      process.kill(group ? -child.pid : child.pid, sig)
    } catch {}
  }
  kill('SIGTERM')
  const t = setTimeout(() => kill('SIGKILL'), 15000)
  await exited
  clearTimeout(t)
}

// until polls f every POLL_MS until it returns true; f's throws count as
// false. It fails if child exits first.
async function until(f, child, what) {
  const deadline = Date.now() + DEADLINE_MS
  let last = 'no answer'
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${what}: the process exited (${child.exitCode ?? child.signalCode})`)
    try {
      if (await f()) return
    } catch (err) {
      last = err.cause?.code ?? err.message
    }
    if (Date.now() > deadline) throw new Error(`${what}: not within ${DEADLINE_MS} ms (last: ${last})`)
    await sleep(POLL_MS)
  }
}

// childrenOf lists the pids whose parent is pid.
function childrenOf(pid) {
  const out = []
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8')
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(d))
    } catch {}
  }
  return out
}

const nulSplit = (buf) => buf.toString('utf8').split('\0').filter((s) => s !== '')

// copyJupyter records how envd started its Jupyter server (a child of envd
// whose argv runs jupyter_server): argv, environment, cwd, user, and a copy
// of its config directory, made our own.
function copyJupyter(envdPid) {
  const isServer = (a) => a === 'jupyter_server' || a.endsWith('/envd_jupyter_server.py')
  const pid = childrenOf(envdPid).find((p) => nulSplit(fs.readFileSync(`/proc/${p}/cmdline`)).some(isServer))
  if (!pid) throw new Error(`no jupyter_server among envd's children (${childrenOf(envdPid).join(' ')})`)
  // envd runs the server through its boot file (python3
  // envd_jupyter_server.py ARGS), which first launches the default context's kernel so that the
  // two start side by side: that overlap is envd's to win, so the
  // baseline runs the server itself (python3 -m jupyter_server ARGS) and
  // then a kernel, one after the other.
  const argv = nulSplit(fs.readFileSync(`/proc/${pid}/cmdline`)).flatMap((a) => (a.endsWith('/envd_jupyter_server.py') ? ['-m', 'jupyter_server'] : [a]))
  if (!argv.includes('jupyter_server')) throw new Error(`cannot tell how envd runs the server: ${argv.join(' ')}`)
  const env = Object.fromEntries(nulSplit(fs.readFileSync(`/proc/${pid}/environ`)).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]))
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
  const uid = Number(/^Uid:\s+(\d+)/m.exec(status)[1])
  const gid = Number(/^Gid:\s+(\d+)/m.exec(status)[1])
  const cwd = fs.readlinkSync(`/proc/${pid}/cwd`)
  const config = path.join(work, 'jupyter-config')
  const runtime = path.join(work, 'jupyter-runtime')
  fs.mkdirSync(config)
  fs.mkdirSync(runtime, { mode: 0o700 })
  fs.chownSync(runtime, uid, gid)
  for (const f of fs.readdirSync(env.JUPYTER_CONFIG_DIR).filter((f) => !f.startsWith('envd_'))) fs.copyFileSync(path.join(env.JUPYTER_CONFIG_DIR, f), path.join(config, f))
  for (const f of fs.readdirSync(config)) fs.chownSync(path.join(config, f), uid, gid)
  const token = JSON.parse(fs.readFileSync(path.join(config, 'jupyter_server_config.json'), 'utf8')).ServerApp.token
  delete env.ENVD_JUPYTER_RUN // envd's tag for its own server's processes
  // envd's pid, which the server's config stops it on when its parent is
  // another (envd gone): this server's parent is this script.
  delete env.ENVD_JUPYTER_PARENT
  env.JUPYTER_CONFIG_DIR = config
  env.JUPYTER_RUNTIME_DIR = runtime
  if (!argv.some((a) => a.startsWith('--ServerApp.port='))) throw new Error(`no --ServerApp.port in ${argv.join(' ')}`)
  return { argv, env, uid, gid, cwd, token }
}

// viaEnvd starts a fresh envd and times it to the first runCode('1') result.
// With jupyter, it also records how envd started Jupyter.
async function viaEnvd(withJupyter) {
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  process.env.E2B_DEBUG = 'true'
  process.env.E2B_SANDBOX_URL = url
  const sbx = await Sandbox.create({ debug: true })
  const log = fs.openSync(path.join(work, 'envd.log'), 'a')
  const args = ['-host', '127.0.0.1', '-port', String(port), '-code-port', '0', '-forward-ports=false', '-mmds-url', 'off', '-log-level', 'warn']
  const t0 = process.hrtime.bigint()
  const child = spawn(envdBinary(), args, { stdio: ['ignore', log, log] })
  fs.closeSync(log)
  try {
    await until(async () => (await fetch(`${url}/health`)).ok, child, 'envd /health')
    await until(
      async () => {
        const exe = await sbx.runCode('1')
        if (exe.error) throw new Error(exe.error.value)
        if (exe.text !== '1') throw new Error(`runCode('1') gave ${JSON.stringify(exe.text)}`)
        return true
      },
      child,
      "envd's first runCode('1')",
    )
    const d = ms(t0)
    const jupyter = withJupyter ? copyJupyter(child.pid) : undefined
    return { d, jupyter }
  } finally {
    await stop(child)
  }
}

// viaJupyter starts the Jupyter server as envd does and times it to ready,
// then a plain kernel's start with the helper while it runs.
async function viaJupyter(j, helper) {
  const port = await freePort()
  const argv = j.argv.map((a) => (a.startsWith('--ServerApp.port=') ? `--ServerApp.port=${port}` : a))
  const log = fs.openSync(path.join(work, 'jupyter.log'), 'a')
  const t0 = process.hrtime.bigint()
  const child = spawn(argv[0], argv.slice(1), { env: j.env, cwd: j.cwd, uid: j.uid, gid: j.gid, detached: true, stdio: ['ignore', log, log] })
  fs.closeSync(log)
  try {
    await until(
      async () => (await fetch(`http://127.0.0.1:${port}/api/status`, { headers: { Authorization: `token ${j.token}` } })).status === 200,
      child,
      'jupyter server /api/status',
    )
    const server = ms(t0)
    const kernel = Number(await helper.ask('start'))
    return { server, kernel, d: server + kernel }
  } finally {
    await stop(child, true)
  }
}

let helper
let plain
try {
  // Warm-up: one of each (it also reads how envd starts Jupyter).
  const { jupyter } = await viaEnvd(true)
  plain = plainKernelEnv({ uid: jupyter.uid, gid: jupyter.gid, home: jupyter.env.HOME ?? '/' })
  helper = kernelHelper({ env: plain.env, uid: jupyter.uid, gid: jupyter.gid })
  await viaJupyter(jupyter, helper)
  const envd = []
  const base = []
  const server = []
  const kernel = []
  for (let i = 0; i < runs; i++) {
    envd.push((await viaEnvd(false)).d)
    const b = await viaJupyter(jupyter, helper)
    base.push(b.d)
    server.push(b.server)
    kernel.push(b.kernel)
  }
  const e = median(envd)
  const b = median(base)
  console.log(`envd start to the first runCode('1') result:   median ${fmt(e)} ms over ${runs} (${envd.map(fmt).join(' ')})`)
  console.log(`jupyter server start to /api/status answering: median ${fmt(median(server))} ms (${server.map(fmt).join(' ')})`)
  console.log(`plain python3 kernel start (KernelManager):    median ${fmt(median(kernel))} ms (${kernel.map(fmt).join(' ')})`)
  console.log(`server + kernel, run by run:                   median ${fmt(b)} ms; ratio ${fmt(e / b)}`)
  console.log(['ROW', 'start', `${fmt(e)} ms`, `${fmt(b)} ms`, fmt(e / b)].join('\t'))
} finally {
  if (helper) await helper.close()
  plain?.dispose()
  fs.rmSync(work, { recursive: true, force: true })
}
