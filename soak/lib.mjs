// Helpers of the soak (soak/soak.mjs): the processes it starts (envd,
// envctl), what /proc says about envd and its Jupyter, and small utilities.
// Every process started here is tracked by pid, and only those pids are
// ever signalled.
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

export const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex')

export class SoakError extends Error {}

/** Throw a SoakError with `msg` unless `cond`. */
export function check(cond, msg) {
  if (!cond) throw new SoakError(typeof msg === 'function' ? msg() : msg)
}

/** A Go-style duration ("10m", "1h30m", "90s", "500ms") in milliseconds. */
export function parseDuration(s) {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy
  let ms = 0
  let m
  let end = 0
  while ((m = re.exec(s))) {
    ms += Number(m[1]) * { ms: 1, s: 1e3, m: 60e3, h: 3600e3 }[m[2]]
    end = re.lastIndex
  }
  if (!s || end !== s.length || ms <= 0) throw new Error(`bad duration ${JSON.stringify(s)}: want e.g. 10m, 1h, 90s`)
  return ms
}

/** A port that was free on 127.0.0.1 a moment ago: the compat harness's. */
export { freePort } from '../test/compat/harness.mjs'

/** Poll `fn` until it returns a truthy value; throws with `what` after `timeoutMs`. */
export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) throw new SoakError(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`)
    await sleep(intervalMs)
  }
}

// ---- processes the soak starts -----------------------------------------------

/** Every child this process started and that has not exited yet, by pid. */
export const children = new Map()

/**
 * Spawn `cmd args` and track it until it exits. Returns { child, exited }
 * where exited resolves to { code, signal, stdout, stderr } (Buffers, unless
 * opts.stdio sends them elsewhere).
 */
export function start(cmd, args, opts = {}) {
  const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], ...opts })
  const out = []
  const err = []
  child.stdout?.on('data', (d) => out.push(d))
  child.stderr?.on('data', (d) => err.push(d))
  child.stdin?.on('error', () => {}) // a child that exits before reading all
  if (child.pid) children.set(child.pid, child)
  const exited = new Promise((resolve) => {
    child.on('error', (e) => {
      children.delete(child.pid)
      resolve({ code: null, signal: null, error: e, stdout: Buffer.concat(out), stderr: Buffer.concat(err) })
    })
    child.on('close', (code, signal) => {
      children.delete(child.pid)
      resolve({ code, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err) })
    })
  })
  return { child, exited, stdoutSoFar: () => Buffer.concat(out).toString() }
}

/** Signal a child this process started (and only such a child). */
export function signalChild(child, sig) {
  if (child.pid && children.has(child.pid)) {
    try {
      process.kill(child.pid, sig)
    } catch {}
  }
}

// Never leave a child behind, whatever happens to this process.
process.on('exit', () => {
  for (const pid of children.keys()) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {}
  }
})

// ---- /proc ------------------------------------------------------------------

/** Every process: pid -> { ppid, comm }. */
export function processTable() {
  const table = new Map()
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8')
      const close = stat.lastIndexOf(')')
      const comm = stat.slice(stat.indexOf('(') + 1, close)
      const ppid = Number(stat.slice(close + 2).split(' ')[1])
      table.set(Number(name), { ppid, comm })
    } catch {} // gone meanwhile
  }
  return table
}

export function childrenOf(table, pid) {
  const out = []
  for (const [p, v] of table) if (v.ppid === pid) out.push(p)
  return out
}

export function descendantsOf(table, pid) {
  const out = []
  const todo = [pid]
  while (todo.length) {
    const p = todo.pop()
    for (const c of childrenOf(table, p)) {
      out.push(c)
      todo.push(c)
    }
  }
  return out
}

export function cmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ')
  } catch {
    return ''
  }
}

/** { rss, rssAnon (bytes), threads, fds } of pid, or null when it is gone. */
export function procStats(pid) {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
    const field = (name) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN)
    return { rss: field('VmRSS') * 1024, rssAnon: field('RssAnon') * 1024, threads: field('Threads'), fds: fs.readdirSync(`/proc/${pid}/fd`).length }
  } catch {
    return null
  }
}

/** pid's open descriptors by kind (socket, pipe, anon_inode:[eventpoll], /dev/ptmx, file...). */
export function fdKinds(pid) {
  const kinds = {}
  let names = []
  try {
    names = fs.readdirSync(`/proc/${pid}/fd`)
  } catch {
    return kinds
  }
  for (const fd of names) {
    let target
    try {
      target = fs.readlinkSync(`/proc/${pid}/fd/${fd}`)
    } catch {
      continue
    }
    const kind = /^(socket|pipe):/.test(target) ? target.split(':')[0] : target.startsWith('anon_inode:') ? target : target.startsWith('/dev/') ? target : 'file'
    kinds[kind] = (kinds[kind] ?? 0) + 1
  }
  return kinds
}

/** The Jupyter server envd started: envd's child running envd's jupyter server script. */
export function jupyterPid(table, envdPid) {
  return childrenOf(table, envdPid).find((p) => /jupyter/.test(cmdline(p))) ?? null
}

/** Kernel processes: the Jupyter server's children started with a connection file. */
export function kernelPids(table, jpid) {
  if (!jpid) return []
  return childrenOf(table, jpid).filter((p) => /\/kernel-[^/ ]*\.json/.test(cmdline(p)))
}

export function fmtBytes(n) {
  if (!Number.isFinite(n)) return '-'
  const mib = n / 1048576
  return `${mib.toFixed(1)}M`
}
