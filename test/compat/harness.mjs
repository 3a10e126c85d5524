// Harness for the compatibility suite: builds envd, runs it on a free
// 127.0.0.1 port and points the unmodified e2b SDKs at it (debug mode).
//
//   import { startEnvd, stopEnvd, dumpLogOnFailure } from './harness.mjs'
//   before(() => startEnvd())
//   after(() => stopEnvd())
//   afterEach((t) => dumpLogOnFailure(t))
//
// Environment:
//   ENVD_BIN                 use this envd binary instead of building ./cmd/envd
//   ENVD_START_TIMEOUT_MS    how long to wait for GET /health (default 30000)
//   ENVD_LOG_LEVEL           envd's -log-level (default debug; the log is shown for failed tests)
//   ENVD_KEEP_LOG=1          keep the temp dir with the logs even when all passed
//   ENVD_COMPAT_ARGS         extra envd flags, space-separated (e.g. -zygote)
//   ENVD_COMPAT_STRICT=1     run envd with -strict-users; tests read STRICT to
//                            expect strict mode's documented differences
import { spawn, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { inspect } from 'node:util'
import assert from 'node:assert/strict'

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

/**
 * Whether envd runs with -strict-users (ENVD_COMPAT_STRICT=1): each request
 * has exactly its user's rights, kernels run as the default user. Else envd
 * behaves as upstream's, and the tests expect upstream's behaviour.
 */
export const STRICT = ['1', 'true'].includes(process.env.ENVD_COMPAT_STRICT ?? '')

/** The account the kernels run as: root as upstream, the default user when strict. */
export const KERNEL_USER = STRICT ? 'user' : 'root'

const START_TIMEOUT_MS = Number(process.env.ENVD_START_TIMEOUT_MS || 30000)
const STOP_TIMEOUT_MS = 15000
const LOG_TAIL_LINES = 200

let workDir // temp dir holding the built binary and the log
let builtBin // path of the binary built by this process (built once)
let envd // { child, port, url, logPath, exited: Promise<{code, signal}> }
let logOffset = 0 // how much of the log dumpLogOnFailure has already shown
let anyFailure = false

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** `promise`'s value, or null if it has not settled within `ms` (0: already settled). */
async function within(promise, ms) {
  let timer
  const timeout = new Promise((resolve) => {
    timer = setTimeout(() => resolve(null), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

function tempDir() {
  workDir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'envd-compat-'))
  return workDir
}

/** Build ./cmd/envd once per test process, or return $ENVD_BIN. */
export function envdBinary() {
  if (process.env.ENVD_BIN) {
    const bin = path.resolve(process.env.ENVD_BIN)
    fs.accessSync(bin, fs.constants.X_OK)
    return bin
  }
  if (builtBin) return builtBin
  const bin = path.join(tempDir(), 'envd')
  try {
    execFileSync('go', ['build', '-o', bin, './cmd/envd'], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 10 * 60 * 1000,
    })
  } catch (err) {
    const out = `${err.stdout ?? ''}${err.stderr ?? ''}`.trim()
    fs.rmSync(workDir, { recursive: true, force: true })
    workDir = undefined
    throw new Error(`go build ./cmd/envd failed in ${REPO_ROOT}:\n${out || err.message}`)
  }
  builtBin = bin
  return bin
}

/** A port that was free on 127.0.0.1 a moment ago. */
export async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

function readLog(from = 0) {
  if (!envd?.logPath) return ''
  try {
    const buf = fs.readFileSync(envd.logPath)
    return buf.subarray(Math.min(from, buf.length)).toString('utf8')
  } catch {
    return ''
  }
}

function tail(text, lines = LOG_TAIL_LINES) {
  const all = text.split('\n')
  if (all.length <= lines) return text
  return `... (${all.length - lines} earlier lines omitted)\n` + all.slice(-lines).join('\n')
}

function logSize() {
  try {
    return fs.statSync(envd.logPath).size
  } catch {
    return 0
  }
}

/**
 * Start envd on a free port and point the SDK at it. Resolves once
 * GET /health answers 204. `opts.args` are extra flags (e.g. ['-default-user', 'root']).
 * With `opts.jupyter`, envd runs with Jupyter (no -no-jupyter) and its
 * code-interpreter API also on a free code port, and this resolves once that
 * port's GET /health answers 200 (the default Python context exists).
 * Returns { url, port, logPath, pid, codeUrl }.
 */
export async function startEnvd(opts = {}) {
  if (envd) throw new Error('envd already started; call stopEnvd() first')
  const bin = envdBinary()
  const port = await freePort()
  const url = `http://127.0.0.1:${port}`
  const logPath = path.join(tempDir(), `envd-${port}.log`)
  const logFd = fs.openSync(logPath, 'a')
  const codePort = opts.jupyter ? await freePort() : 0
  const codeUrl = opts.jupyter ? `http://127.0.0.1:${codePort}` : undefined
  // -forward-ports=false: never forward the machine's own addresses;
  // -mmds-url off: never ask the real metadata address from a test;
  // -run-dir '': never write the machine's /run/e2b.
  const args = ['-host', '127.0.0.1', '-port', String(port), '-code-port', String(codePort), '-forward-ports=false', '-mmds-url', 'off', '-run-dir', '']
  if (!opts.jupyter) args.push('-no-jupyter')
  if (STRICT) args.push('-strict-users')
  args.push(...(process.env.ENVD_COMPAT_ARGS ?? '').split(' ').filter(Boolean))
  args.push('-log-level', process.env.ENVD_LOG_LEVEL || 'debug', ...(opts.args ?? []))

  const child = spawn(bin, args, { stdio: ['ignore', logFd, logFd], env: { ...process.env, ...opts.env } })
  fs.closeSync(logFd)
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }))
    child.on('error', (err) => resolve({ code: null, signal: null, err }))
  })
  envd = { child, port, url, logPath, exited, args }
  logOffset = 0

  // The SDK reads these at call time: debug mode, and every envd call to our port.
  process.env.E2B_DEBUG = 'true'
  process.env.E2B_SANDBOX_URL = url

  const deadline = Date.now() + (opts.jupyter ? Math.max(START_TIMEOUT_MS, 120000) : START_TIMEOUT_MS)
  const probe = opts.jupyter ? `${codeUrl}/health` : `${url}/health`
  const healthy = opts.jupyter ? 200 : 204
  let last = 'no answer'
  let status
  while (Date.now() < deadline) {
    const early = await within(exited, 0)
    if (early) {
      const what = early.err ? early.err.message : `code ${early.code}, signal ${early.signal}`
      envd = undefined
      throw new Error(`envd exited during startup (${what}): ${bin} ${args.join(' ')}\n--- ${logPath}\n${tail(readLogAt(logPath))}`)
    }
    try {
      const res = await fetch(probe, { signal: AbortSignal.timeout(1000) })
      status = res.status
      const body = await res.text()
      if (status === healthy) return { url, port, logPath, pid: child.pid, codeUrl }
      last = `HTTP ${status} ${body}`.trim()
    } catch (err) {
      last = err.cause?.code ?? err.message
    }
    await sleep(50)
  }
  const info = `${bin} ${args.join(' ')}`
  child.kill('SIGKILL')
  await envd.exited
  const log = readLog()
  envd = undefined
  throw new Error(`envd did not answer GET ${probe} with ${healthy} in time (last: ${last}): ${info}\n--- ${logPath}\n${tail(log)}`)
}

function readLogAt(p) {
  try {
    return fs.readFileSync(p, 'utf8')
  } catch {
    return ''
  }
}

/** The running envd ({ url, port, logPath, child }), or undefined. */
export function currentEnvd() {
  return envd
}

/** Stop envd with SIGTERM and assert it exits with code 0. */
export async function stopEnvd() {
  if (!envd) return
  const { child, exited, logPath } = envd
  const already = await within(exited, 0)
  let result = already
  if (!already) {
    child.kill('SIGTERM')
    result = await within(exited, STOP_TIMEOUT_MS)
    if (!result) {
      child.kill('SIGKILL')
      await exited
    }
  }
  const log = readLog()
  envd = undefined
  delete process.env.E2B_SANDBOX_URL

  let problem
  if (already) problem = `envd died before stopEnvd (code ${already.code}, signal ${already.signal})`
  else if (!result) problem = `envd did not exit within ${STOP_TIMEOUT_MS} ms of SIGTERM (killed)`
  else if (result.code !== 0) problem = `envd exited with code ${result.code}, signal ${result.signal} after SIGTERM (want code 0)`
  if (problem) {
    anyFailure = true
    throw new Error(`${problem}\n--- ${logPath}\n${tail(log)}`)
  }
  cleanUp()
}

// After the last stop: drop the temp dir, but keep the logs when a test failed
// (or ENVD_KEEP_LOG is set). The built binary is kept for the next start and
// removed when the process exits.
function cleanUp() {
  if (!workDir || process.env.ENVD_KEEP_LOG) return
  if (!anyFailure) {
    fs.rmSync(workDir, { recursive: true, force: true })
    workDir = undefined
    builtBin = undefined
  }
}


/**
 * For afterEach((t) => dumpLogOnFailure(t)): when the test failed, print the
 * envd log written since the previous test ended.
 */
export function dumpLogOnFailure(t) {
  if (!envd) return
  const size = logSize()
  if (t && t.passed === false) {
    anyFailure = true
    const text = readLog(logOffset)
    process.stderr.write(
      `\n----- envd log for failed test "${t.name}" (${envd.logPath}) -----\n${tail(text)}\n----- end envd log -----\n`,
    )
  }
  logOffset = size
}

// Never leave an envd behind, whatever happens to this process.
process.on('exit', () => {
  if (envd) envd.child.kill('SIGKILL')
  if (builtBin && workDir) fs.rmSync(builtBin, { force: true })
  if (workDir && anyFailure) process.stderr.write(`envd logs kept in ${workDir}\n`)
})

// ---- small helpers for tests -------------------------------------------------

/** Await a promise that must reject; returns the error (fails the test if it resolves). */
export async function rejection(promise, what = 'the call') {
  let value
  try {
    value = await promise
  } catch (err) {
    return err
  }
  assert.fail(`expected ${what} to reject, but it resolved with ${inspect(value, { depth: 2 })}`)
}

/** Poll `fn` until it returns a truthy value; throws with `what` after `timeoutMs`. */
export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 25, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(intervalMs)
  }
}
