// The soak's operations (soak/soak.mjs runs them): each takes the run's
// environment `env` and its own `op` ({ id, step(text), defer(fn) }),
// does one thing a user does through the e2b SDKs or envctl, checks the
// result, and closes what it made. op.step names what it is waiting for (a
// stall reports it); op.defer registers a cleanup that runs once the op
// ends or stalls, for what a failed op left open (closing twice is fine).
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import {
  SoakError,
  check,
  childrenOf,
  cmdline,
  jupyterPid,
  kernelPids,
  processTable,
  sha256,
  signalChild,
  sleep,
  start,
  waitFor,
} from './lib.mjs'

const enc = new TextEncoder()
const KiB = 1024
const MiB = 1024 * KiB

/** seq 1 n, as the sandbox prints it. */
const seqCache = new Map()
function seqText(n) {
  if (!seqCache.has(n)) {
    const lines = new Array(n)
    for (let i = 0; i < n; i++) lines[i] = String(i + 1)
    seqCache.set(n, lines.join('\n') + '\n')
  }
  return seqCache.get(n)
}

const arrayBuffer = (buf) => buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.length)

/** What an execution printed and displayed, as one string. */
function outputOf(exe) {
  return [exe.text ?? '', ...exe.results.map((r) => r.text ?? ''), ...exe.logs.stdout].join('\n')
}

function describeExe(exe) {
  return JSON.stringify({
    text: exe.text,
    results: exe.results.map((r) => r.text),
    stdout: exe.logs.stdout.join('').slice(0, 300),
    stderr: exe.logs.stderr.join('').slice(0, 300),
    error: exe.error && { name: exe.error.name, value: exe.error.value },
  })
}

// Per language: code that sets x to 41, code that shows x + 1 (42), code
// that prints "started" then runs for a minute, a check that prints 42
// without x, as each kernel takes them.
export const LANGS = {
  python: { set: 'x = 41', get: 'x + 1', long: 'import time\nprint("started", flush=True)\ntime.sleep(60)', probe: '6 * 7' },
  javascript: {
    set: 'var x = 41',
    get: 'x + 1',
    long: 'console.log("started"); await new Promise((r) => setTimeout(r, 60000))',
    probe: '6 * 7',
  },
  typescript: {
    set: 'var x: number = 41',
    get: 'x + 1',
    long: 'console.log("started"); await new Promise((r) => setTimeout(r, 60000))',
    probe: 'const y: number = 6 * 7; y',
  },
  r: { set: 'x <- 41', get: 'x + 1', long: 'cat("started\\n"); Sys.sleep(60)', probe: '6 * 7' },
  bash: { set: 'x=41', get: 'echo $((x + 1))', long: 'echo started; sleep 60', probe: 'echo $((6 * 7))' },
  java: { set: 'int x = 41;', get: 'x + 1', long: 'System.out.println("started"); Thread.sleep(60000);', probe: '6 * 7' },
}

/** A fresh code context of `language` in the scratch directory, removed by op's cleanup. */
async function newContext(env, op, language) {
  op.step(`createCodeContext(${language})`)
  const ctx = await env.code.createCodeContext({ language, cwd: env.scratch })
  check(ctx?.id && ctx.language === language, () => `createCodeContext(${language}) gave ${JSON.stringify(ctx)}`)
  env.live.contexts.add(ctx.id)
  let removed = false
  const remove = async () => {
    if (removed) return
    removed = true
    await env.code.removeCodeContext(ctx.id)
    env.live.contexts.delete(ctx.id)
  }
  op.defer(() => remove().catch(() => {}))
  return { ctx, remove }
}

async function run(env, op, code, ctx, opts = {}) {
  op.step(`runCode(${JSON.stringify(code.slice(0, 40))})`)
  return env.code.runCode(code, { context: ctx, timeoutMs: 60000, ...opts })
}

/**
 * The pid of ctx's kernel: the child of our envd's Jupyter server whose
 * connection file is kernel-<context id>.json (a context's kernel has its
 * id). Only ever a kernel of the soak's own envd.
 */
function kernelPidOf(env, ctxId) {
  const table = processTable()
  const jp = jupyterPid(table, env.envdPid)
  check(jp, `no Jupyter server under envd (pid ${env.envdPid})`)
  const pids = kernelPids(table, jp).filter((p) => cmdline(p).includes(`/kernel-${ctxId}.json`))
  check(pids.length === 1, () => `kernel of context ${ctxId}: found ${pids.length} among Jupyter's children ${childrenOf(table, jp).map((p) => `${p}: ${cmdline(p).slice(0, 120)}`).join('; ')}`)
  const pid = pids[0]
  check(table.get(pid).ppid === jp && table.get(jp).ppid === env.envdPid, `kernel ${pid} is not our envd's`)
  return pid
}

const alive = (pid) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Run envctl to the end; input is stdin's content (default: none). */
async function envctl(env, op, args, { input } = {}) {
  op.step(`envctl ${args.join(' ').slice(0, 80)}`)
  const p = start(env.envctlBin, args, { env: env.envctlEnv })
  op.defer(() => signalChild(p.child, 'SIGKILL'))
  p.child.stdin.end(input ?? '')
  return p.exited
}

function envctlOK(r, what) {
  check(r.code === 0, () => `${what}: exit ${r.code} ${r.signal ?? ''}: ${r.stderr.toString().slice(0, 500)}`)
}

// ---- commands -----------------------------------------------------------------

async function cmdShort(env, op) {
  op.step('commands.run')
  const r = await env.sbx.commands.run('echo soak-$((6*7)); id -un')
  check(r.exitCode === 0 && r.stdout === 'soak-42\nuser\n', () => `got ${JSON.stringify(r)}`)
}

async function cmdLong(env, op) {
  const want = Array.from({ length: 15 }, (_, i) => `tick ${i + 1}\n`).join('')
  let got = ''
  op.step('commands.run background')
  const h = await env.sbx.commands.run('for i in $(seq 1 15); do echo tick $i; sleep 0.2; done', {
    background: true,
    onStdout: (d) => (got += d),
  })
  op.defer(() => h.kill().catch(() => {}))
  op.step('wait')
  const r = await h.wait()
  check(r.exitCode === 0 && r.stdout === want && got === want, () => `got ${JSON.stringify(r.stdout)} / callbacks ${JSON.stringify(got)}`)
}

async function cmdStdin(env, op) {
  const data = crypto.randomBytes(256 * KiB)
  op.step('commands.run sha256sum, stdin')
  const h = await env.sbx.commands.run('sha256sum', { background: true, stdin: true })
  op.defer(() => h.kill().catch(() => {}))
  for (let off = 0; off < data.length; off += 64 * KiB) {
    op.step(`sendStdin at ${off}`)
    await h.sendStdin(new Uint8Array(data.subarray(off, off + 64 * KiB)))
  }
  op.step('closeStdin')
  await h.closeStdin()
  op.step('wait')
  const r = await h.wait()
  check(r.stdout === `${sha256(data)}  -\n`, () => `sha256sum of stdin: ${JSON.stringify(r.stdout)}, want ${sha256(data)}`)
}

async function cmdTimeout(env, op) {
  const t0 = Date.now()
  op.step('commands.run sleep 30, timeoutMs 1500')
  const err = await env.sbx.commands.run('sleep 30', { timeoutMs: 1500 }).then(
    () => null,
    (e) => e,
  )
  check(err?.name === 'TimeoutError', () => `want TimeoutError, got ${err ? `${err.name}: ${err.message}` : 'success'}`)
  check(Date.now() - t0 < 10000, `the timeout took ${Date.now() - t0} ms`)
}

async function cmdKill(env, op) {
  op.step('commands.run sleep 60')
  const h = await env.sbx.commands.run('sleep 60', { background: true })
  op.defer(() => h.kill().catch(() => {}))
  op.step('kill')
  check((await h.kill()) === true, 'kill() of a running command returned false')
  op.step('wait')
  const err = await h.wait().then(
    () => null,
    (e) => e,
  )
  check(err?.exitCode === -1 && err.error === 'signal: killed', () => `wait after kill: ${err ? `${err.name} ${err.exitCode} ${err.error}` : 'success'}`)
}

async function envctlRunStdin(env, op) {
  const data = crypto.randomBytes(1 * MiB)
  const r = await envctl(env, op, ['run', '--', 'sha256sum'], { input: data })
  envctlOK(r, 'envctl run sha256sum')
  check(r.stdout.toString() === `${sha256(data)}  -\n`, () => `got ${r.stdout}`)
}

async function pty(env, op) {
  let out = ''
  const dec = new TextDecoder()
  op.step('pty.create')
  const h = await env.sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d, { stream: true })) })
  op.defer(() => env.sbx.pty.kill(h.pid).catch(() => {}))
  const send = (s) => env.sbx.pty.sendInput(h.pid, enc.encode(s))
  await send('stty size; echo pty-$((2+3))\n')
  op.step('waiting for "24 80" and pty-5')
  await waitFor(() => /(^|[\r\n])24 80\r?\n/.test(out) && /(^|[\r\n])pty-5\r?\n/.test(out), { what: () => `pty output ${JSON.stringify(out)}` })
  op.step('resize')
  await env.sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await send('stty size; exit 3\n')
  op.step('wait')
  const err = await h.wait().then(
    () => null,
    (e) => e,
  )
  check(err?.exitCode === 3, () => `pty exit: ${err ? `${err.name} ${err.exitCode}` : 'exit 0'}; output ${JSON.stringify(out)}`)
  check(/(^|[\r\n])30 100\r?\n/.test(out), () => `no "30 100" after resize in ${JSON.stringify(out)}`)
}

// ---- files --------------------------------------------------------------------

const SDK_SIZES = [0, 1 * KiB, 100 * KiB, 1 * MiB, 8 * MiB]
const ENVCTL_SIZES = [1 * KiB, 3 * MiB, 16 * MiB]

async function filesSDK(env, op) {
  const size = SDK_SIZES[op.n % SDK_SIZES.length]
  const opts = [{}, { useOctetStream: true }, { gzip: true }][op.n % 3]
  const data = crypto.randomBytes(size)
  const p = `${env.scratch}/sdk-${op.id}.bin`
  op.defer(() => fs.rmSync(p, { force: true }))
  op.step(`files.write ${size} bytes ${JSON.stringify(opts)}`)
  const info = await env.sbx.files.write(p, arrayBuffer(data), opts)
  check(info.path === p, () => `write gave ${JSON.stringify(info)}`)
  op.step('files.read')
  const back = await env.sbx.files.read(p, { format: 'bytes', gzip: !!opts.gzip })
  check(back.length === size && sha256(back) === sha256(data), () => `read back ${back.length} bytes, sha256 ${sha256(back)}; wrote ${size}, ${sha256(data)}`)
  op.step('sha256sum in the sandbox')
  const r = await env.sbx.commands.run(`sha256sum ${p}`)
  check(r.stdout.startsWith(sha256(data)), () => `sha256sum in the sandbox: ${r.stdout}`)
  op.step('files.remove')
  await env.sbx.files.remove(p)
  check(!(await env.sbx.files.exists(p)), 'still exists after remove')
}

async function filesEnvctl(env, op) {
  const size = ENVCTL_SIZES[op.n % ENVCTL_SIZES.length]
  const data = crypto.randomBytes(size)
  const local = path.join(env.localDir, `up-${op.id}.bin`)
  const back = path.join(env.localDir, `down-${op.id}.bin`)
  const remote = `${env.scratch}/cp-${op.id}.bin`
  op.defer(() => [local, back, remote].forEach((f) => fs.rmSync(f, { force: true })))
  fs.writeFileSync(local, data)
  envctlOK(await envctl(env, op, ['cp', local, `envd:${remote}`]), 'envctl cp up')
  envctlOK(await envctl(env, op, ['cp', `envd:${remote}`, back]), 'envctl cp down')
  const got = fs.readFileSync(back)
  check(got.length === size && sha256(got) === sha256(data), () => `copied back ${got.length} bytes ${sha256(got)}, want ${size} ${sha256(data)}`)
  op.step('files.remove')
  await env.sbx.files.remove(remote)
  fs.rmSync(local)
  fs.rmSync(back)
}

// ---- code ---------------------------------------------------------------------

/** A context of `lang`: state kept across executions, then removed and gone from the list. */
async function codeContext(env, op, lang) {
  const L = LANGS[lang]
  const { ctx, remove } = await newContext(env, op, lang)
  const a = await run(env, op, L.set, ctx)
  check(!a.error, () => `${L.set}: ${describeExe(a)}`)
  const b = await run(env, op, L.get, ctx)
  check(!b.error && outputOf(b).includes('42'), () => `${L.get}: ${describeExe(b)}`)
  op.step('removeCodeContext')
  await remove()
  op.step('listCodeContexts')
  const list = await env.code.listCodeContexts()
  check(!list.some((c) => c.id === ctx.id), `context ${ctx.id} still listed after removal`)
}

/** The SDK's timeoutMs on a running cell: TimeoutError, then the context runs again, its state kept. */
async function codeTimeout(env, op) {
  const { ctx, remove } = await newContext(env, op, 'python')
  await run(env, op, 'x = 41', ctx)
  const t0 = Date.now()
  const err = await run(env, op, 'import time; time.sleep(60)', ctx, { timeoutMs: 1500 }).then(
    () => null,
    (e) => e,
  )
  check(err?.name === 'TimeoutError', () => `want TimeoutError, got ${err ? `${err.name}: ${err.message}` : 'success'}`)
  const b = await run(env, op, 'x + 1', ctx)
  check(b.text === '42', () => `after the timeout: ${describeExe(b)}`)
  check(Date.now() - t0 < 20000, `the interrupted context took ${Date.now() - t0} ms to answer again`)
  await remove()
}

/** envctl exec-code interrupted by SIGINT (as Ctrl-C): end reason interrupted, then the context runs again. */
async function codeInterrupt(env, op, lang) {
  const L = LANGS[lang]
  const { ctx, remove } = await newContext(env, op, lang)
  const file = path.join(env.localDir, `long-${op.id}.txt`)
  op.defer(() => fs.rmSync(file, { force: true }))
  fs.writeFileSync(file, L.long)
  op.step('envctl exec-code')
  const p = start(env.envctlBin, ['exec-code', '--json', '--context', ctx.id, file], { env: env.envctlEnv })
  op.defer(() => signalChild(p.child, 'SIGKILL'))
  p.child.stdin.end()
  op.step('waiting for "started"')
  await waitFor(() => p.stdoutSoFar().includes('started'), { timeoutMs: 30000, what: () => `"started" from exec-code (${p.stdoutSoFar().slice(0, 300)})` })
  signalChild(p.child, 'SIGINT')
  op.step('exec-code to end after SIGINT')
  const r = await p.exited
  const events = r.stdout
    .toString()
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
  const end = events.at(-1)
  check(end?.type === 'end' && end.reason === 'interrupted', () => `exec-code ended ${JSON.stringify(end)} (exit ${r.code}; ${r.stderr})`)
  const b = await run(env, op, L.probe, ctx)
  check(!b.error && outputOf(b).includes('42'), () => `after the interrupt: ${describeExe(b)}`)
  fs.rmSync(file)
  await remove()
}

/** SIGKILL the kernel of an idle context: the next run says it died and runs on a new kernel. */
async function codeKill(env, op, lang) {
  const L = LANGS[lang]
  const { ctx, remove } = await newContext(env, op, lang)
  const a = await run(env, op, L.set, ctx)
  check(!a.error, () => `${L.set}: ${describeExe(a)}`)
  const pid = kernelPidOf(env, ctx.id)
  process.kill(pid, 'SIGKILL')
  op.step(`kernel ${pid} to go`)
  await waitFor(() => !alive(pid), { what: `kernel ${pid} to die` })
  const b = await run(env, op, L.probe, ctx)
  const told = b.logs.stderr.join('').includes('kernel died') || b.error?.name === 'ContextRestarting'
  check(told, () => `the run after the kernel's death does not say so: ${describeExe(b)}`)
  const c = await run(env, op, L.probe, ctx)
  check(!c.error && outputOf(c).includes('42'), () => `on the new kernel: ${describeExe(c)}`)
  const pid2 = kernelPidOf(env, ctx.id)
  check(pid2 !== pid, 'same kernel pid after the kill')
  await remove()
}

/** SIGKILL the kernel while it runs a cell: the cell ends at once with ContextRestarting. */
async function codeKillBusy(env, op) {
  const { ctx, remove } = await newContext(env, op, 'python')
  let started = false
  const t0 = Date.now()
  const running = run(env, op, LANGS.python.long, ctx, { onStdout: (m) => (started ||= m.line.includes('started')) })
  running.catch(() => {})
  await waitFor(() => started, { timeoutMs: 30000, what: '"started"' })
  const pid = kernelPidOf(env, ctx.id)
  process.kill(pid, 'SIGKILL')
  op.step('the running cell to end')
  const exe = await running
  check(exe.error?.name === 'ContextRestarting', () => `the cell whose kernel was killed: ${describeExe(exe)}`)
  check(Date.now() - t0 < 30000, 'the cell did not end at once')
  const b = await run(env, op, '6 * 7', ctx)
  check(b.text === '42', () => `on the new kernel: ${describeExe(b)}`)
  await remove()
}

/** The default Python context, with per-execution env vars. */
async function codeDefault(env, op) {
  op.step('runCode default context')
  const v = `v${op.id}`
  const exe = await env.code.runCode('import os; os.environ["SOAK_V"]', { envs: { SOAK_V: v }, timeoutMs: 60000 })
  check(exe.text === v, () => `default context: ${describeExe(exe)}`)
}

// ---- big outputs ----------------------------------------------------------------

async function bigoutCmd(env, op) {
  const want = seqText(700000) // 4.7 MB
  let streamed = 0
  op.step('commands.run seq 1 700000')
  const r = await env.sbx.commands.run('seq 1 700000', { onStdout: (d) => (streamed += d.length), timeoutMs: 120000 })
  check(r.stdout.length === want.length && sha256(r.stdout) === sha256(want), () => `stdout: ${r.stdout.length} chars, want ${want.length}`)
  check(streamed === want.length, `onStdout got ${streamed} chars, want ${want.length}`)
}

async function bigoutEnvctl(env, op) {
  const want = seqText(1000000) // 6.9 MB
  const r = await envctl(env, op, ['run', '--', 'seq', '1', '1000000'])
  envctlOK(r, 'envctl run seq')
  check(r.stdout.length === want.length && sha256(r.stdout) === sha256(want), () => `stdout: ${r.stdout.length} bytes, want ${want.length}`)
}

async function bigoutCode(env, op) {
  const want = seqText(400000) // 2.7 MB
  op.step('runCode printing 2.7 MB')
  const exe = await env.code.runCode('print("\\n".join(str(i) for i in range(1, 400001)))', { timeoutMs: 120000 })
  const out = exe.logs.stdout.join('')
  check(!exe.error && out.length === want.length && sha256(out) === sha256(want), () => `stdout: ${out.length} chars, want ${want.length}; stderr ${exe.logs.stderr.join('').slice(0, 300)}`)
}

// ---- watchers -------------------------------------------------------------------

async function watchSDK(env, op) {
  const dir = `${env.scratch}/w-${op.id}`
  op.defer(() => fs.rmSync(dir, { recursive: true, force: true }))
  op.step('makeDir')
  await env.sbx.files.makeDir(dir)
  const seen = new Set()
  op.step('watchDir')
  const h = await env.sbx.files.watchDir(dir, (e) => seen.add(`${e.type} ${e.name}`), { recursive: true })
  op.defer(() => h.stop().catch(() => {}))
  const want = []
  for (let i = 0; i < 8; i++) {
    op.step(`write f${i}.txt`)
    await env.sbx.files.write(`${dir}/f${i}.txt`, `x${i}`)
    want.push(`write f${i}.txt`)
  }
  await env.sbx.files.makeDir(`${dir}/sub`)
  await env.sbx.files.write(`${dir}/sub/g.txt`, 'g')
  want.push('create sub', 'write sub/g.txt')
  op.step('events')
  await waitFor(() => want.every((w) => seen.has(w)), { what: () => `events ${want.filter((w) => !seen.has(w))} (got ${[...seen]})` })
  op.step('stop')
  await h.stop()
  await env.sbx.files.remove(dir)
}

async function watchEnvctl(env, op) {
  const dir = `${env.scratch}/we-${op.id}`
  op.defer(() => fs.rmSync(dir, { recursive: true, force: true }))
  op.step('mkdir')
  await env.sbx.commands.run(`mkdir ${dir}`)
  op.step('envctl watch')
  const p = start(env.envctlBin, ['watch', '--json', dir], { env: env.envctlEnv })
  op.defer(() => signalChild(p.child, 'SIGKILL'))
  p.child.stdin.end()
  let stderr = ''
  p.child.stderr.on('data', (d) => (stderr += d))
  await waitFor(() => stderr.includes('watching'), { what: () => `"watching" from envctl watch (stderr ${stderr})` })
  op.step('writing files')
  await env.sbx.commands.run(`for i in 1 2 3 4 5; do echo $i > ${dir}/e$i.txt; done`)
  const names = () =>
    new Set(
      p
        .stdoutSoFar()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l))
        .filter((e) => e.op === 'write')
        .map((e) => e.name),
    )
  op.step('events')
  await waitFor(() => [1, 2, 3, 4, 5].every((i) => names().has(`e${i}.txt`)), { what: () => `write events of e1..e5.txt (got ${p.stdoutSoFar()})` })
  signalChild(p.child, 'SIGINT')
  op.step('envctl watch to end after SIGINT')
  const r = await p.exited
  check(r.signal === null, `envctl watch ended by ${r.signal}`)
  await env.sbx.files.remove(dir)
}

// ---- ports ----------------------------------------------------------------------

/** A server started by a command, found by envd's port scan, reached through envctl forward and the SDK's getHost. */
async function portsForward(env, op) {
  const dir = `${env.scratch}/www-${op.id}`
  op.defer(() => fs.rmSync(dir, { recursive: true, force: true }))
  const data = crypto.randomBytes(200 * KiB)
  op.step('files.write')
  await env.sbx.files.write(`${dir}/data.bin`, arrayBuffer(data))
  let out = ''
  op.step('start the server')
  const h = await env.sbx.commands.run(`exec python3 -u -m http.server 0 --bind 127.0.0.1 --directory ${dir}`, {
    background: true,
    onStdout: (d) => (out += d),
    onStderr: () => {},
  })
  op.defer(() => h.kill().catch(() => {}))
  op.step('the server to listen')
  const port = Number(await waitFor(() => /port (\d+)/.exec(out)?.[1], { what: () => `http.server's port (stdout ${out})` }))
  op.step(`envctl ports to list ${port}`)
  await waitFor(
    async () => {
      const r = await envctl(env, op, ['ports', '--json', '--port', String(port)])
      envctlOK(r, 'envctl ports')
      return JSON.parse(r.stdout.toString()).some((l) => l.port === port && l.pid === h.pid && !l.private)
    },
    { timeoutMs: 15000, intervalMs: 300, what: `envctl ports to list ${port} (pid ${h.pid})` },
  )
  op.step('envctl forward')
  const fw = start(env.envctlBin, ['forward', `:${port}`], { env: env.envctlEnv })
  op.defer(() => signalChild(fw.child, 'SIGKILL'))
  fw.child.stdin.end()
  const local = await waitFor(() => /Forwarding from 127\.0\.0\.1:(\d+)/.exec(fw.stdoutSoFar())?.[1], { what: () => `"Forwarding from" (${fw.stdoutSoFar()})` })
  for (let i = 0; i < 3; i++) {
    op.step(`GET through envctl forward #${i}`)
    const res = await fetch(`http://127.0.0.1:${local}/data.bin`, { signal: AbortSignal.timeout(15000) })
    const got = Buffer.from(await res.arrayBuffer())
    check(res.status === 200 && sha256(got) === sha256(data), `through envctl forward: ${res.status}, ${got.length} bytes`)
  }
  // The SDK's way: getHost(port) is the address a browser uses (debug
  // mode: localhost:PORT, the server itself).
  const host = env.sbx.getHost(port)
  op.step(`GET http://${host}`)
  const res = await fetch(`http://${host}/data.bin`, { signal: AbortSignal.timeout(15000) })
  const got = Buffer.from(await res.arrayBuffer())
  check(res.status === 200 && sha256(got) === sha256(data), `through getHost ${host}: ${res.status}, ${got.length} bytes`)
  signalChild(fw.child, 'SIGINT')
  op.step('envctl forward to end after SIGINT')
  await fw.exited
  op.step('kill the server')
  await h.kill()
  await h.wait().catch(() => {})
  await env.sbx.files.remove(dir)
}

// ---- the schedule ---------------------------------------------------------------

/** Kinds of operation: name, function, deadline (a stall beyond it), languages it rotates through. */
export const KINDS = {
  'cmd.short': { fn: cmdShort, deadline: 20e3 },
  'cmd.long': { fn: cmdLong, deadline: 30e3 },
  'cmd.stdin': { fn: cmdStdin, deadline: 30e3 },
  'cmd.timeout': { fn: cmdTimeout, deadline: 30e3 },
  'cmd.kill': { fn: cmdKill, deadline: 20e3 },
  'envctl.run.stdin': { fn: envctlRunStdin, deadline: 30e3 },
  pty: { fn: pty, deadline: 30e3 },
  'files.sdk': { fn: filesSDK, deadline: 60e3 },
  'files.envctl': { fn: filesEnvctl, deadline: 60e3 },
  'code.ctx': { fn: codeContext, deadline: 120e3, langs: Object.keys(LANGS) },
  'code.timeout': { fn: codeTimeout, deadline: 60e3 },
  'code.interrupt': { fn: codeInterrupt, deadline: 90e3, langs: ['python', 'bash', 'r', 'javascript'] },
  'code.kill': { fn: codeKill, deadline: 120e3, langs: Object.keys(LANGS) },
  'code.killBusy': { fn: codeKillBusy, deadline: 60e3 },
  'code.default': { fn: codeDefault, deadline: 60e3 },
  'bigout.cmd': { fn: bigoutCmd, deadline: 60e3 },
  'bigout.envctl': { fn: bigoutEnvctl, deadline: 60e3 },
  'bigout.code': { fn: bigoutCode, deadline: 60e3 },
  'watch.sdk': { fn: watchSDK, deadline: 30e3 },
  'watch.envctl': { fn: watchEnvctl, deadline: 30e3 },
  'ports.forward': { fn: portsForward, deadline: 45e3 },
}

/** One cycle: every kind, code contexts twice (six languages to go round). */
export const SCHEDULE = [
  'cmd.short',
  'files.sdk',
  'code.ctx',
  'cmd.stdin',
  'pty',
  'bigout.cmd',
  'code.timeout',
  'watch.sdk',
  'envctl.run.stdin',
  'code.kill',
  'cmd.long',
  'files.envctl',
  'code.interrupt',
  'ports.forward',
  'bigout.code',
  'cmd.kill',
  'watch.envctl',
  'code.ctx',
  'cmd.timeout',
  'bigout.envctl',
  'code.killBusy',
  'code.default',
]

export { SoakError, sleep }
