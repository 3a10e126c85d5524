// Benchmark: commands.run('true') through the unmodified e2b SDK against a
// real envd, versus spawning the same `/bin/bash -l -c true` as the same user,
// in the same directory and with the same environment, straight from this
// Node process, in the same run:
//
//   - one at a time: the two interleaved, run for run, so machine noise hits
//     both alike; ratio of medians. A third runs between them, for
//     information: the same commands.run against bench/spawnfloor, a bare Go
//     server that only spawns the command and sends its start and end (no
//     cgroups, no output, no checks). Its ratio to the direct spawn is the
//     floor the SDK and a bare Go spawn leave, in this run;
//   - 100 at once: one Sandbox object, Promise.all of 100 commands.run('true')
//     (the SDK's own connection handling: one origin, one fetch agent), versus
//     Promise.all of 100 direct spawns; rounds of each interleaved; per-call
//     latency (each call's start to its own end) pooled over the rounds;
//     median and p99 of each, ratio of p99s.
//
// Prints ROW lines for bench/run.sh's table (cmd, cmd100).
//
//   node bench/sdk-commands.mjs [runs] [rounds]      (ENVD_BIN to use a built binary)
import { spawn, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import { createRequire } from 'node:module'
import { REPO_ROOT, startEnvd, stopEnvd } from '../test/compat/harness.mjs'
import { fmt, median, ms, p99 } from './stats.mjs'

const runs = Number(process.argv[2] || 200)
const rounds = Number(process.argv[3] || 20)
const concurrency = 100
const require = createRequire(new URL('../test/compat/package.json', import.meta.url))
const { Sandbox } = await import(require.resolve('e2b'))

// The SDK names no user, so envd runs commands as its default user: `user`
// when that account exists. The baseline runs as the same account, in the
// same directory, with the very environment envd gives its child (read
// below from the child's /proc/PID/environ: what execve got, before any
// profile ran). The environment is part of the work: with envd's LANG
// (C.UTF-8), bash and the id its profile runs load a locale, 0.4 ms of a
// 4 ms spawn here.
const user = 'user'
const uid = Number(execFileSync('id', ['-u', user]).toString())
const gid = Number(execFileSync('id', ['-g', user]).toString())
const home = `/home/${user}`
let env = null // envd's child's environment, read once envd runs

function direct() {
  return new Promise((resolve, reject) => {
    const c = spawn('/bin/bash', ['-l', '-c', 'true'], { uid, gid, cwd: home, env, stdio: ['ignore', 'pipe', 'pipe'] })
    c.stdout.resume()
    c.stderr.resume()
    c.on('error', reject)
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`bash exited ${code}`))))
  })
}

const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 1 })
const row = (key, envd, base, ratio) => console.log(['ROW', key, envd, base, fmt(ratio)].join('\t'))

// timed runs f and resolves to its latency in ms.
async function timed(f) {
  const t0 = process.hrtime.bigint()
  await f()
  return ms(t0)
}

// startFloor builds and starts bench/spawnfloor with envd's child's
// environment; resolves to { url, stop }.
async function startFloor() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-spawnfloor-'))
  const bin = path.join(dir, 'spawnfloor')
  execFileSync('go', ['build', '-o', bin, './bench/spawnfloor'], { cwd: REPO_ROOT, stdio: ['ignore', 'inherit', 'inherit'] })
  const child = spawn(bin, ['-uid', String(uid), '-gid', String(gid), '-dir', home], { env, stdio: ['ignore', 'pipe', 'inherit'] })
  const url = await new Promise((resolve, reject) => {
    child.on('exit', (code) => reject(new Error(`spawnfloor exited ${code}`)))
    readline.createInterface({ input: child.stdout }).once('line', resolve)
  })
  return { url, stop: () => { child.kill('SIGKILL'); fs.rmSync(dir, { recursive: true, force: true }) } }
}

await startEnvd({ args: ['-log-level', 'warn'] })
let floor
try {
  const sbx = await Sandbox.create({ debug: true })
  const environ = (await sbx.commands.run('tr "\\0" "\\n" < /proc/$$/environ')).stdout
  env = Object.fromEntries(environ.split('\n').filter((l) => l.includes('=')).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]))
  console.log(`baseline environment, as envd gives it: ${Object.keys(env).sort().join(' ')}`)
  floor = await startFloor()
  const envdURL = process.env.E2B_SANDBOX_URL
  process.env.E2B_SANDBOX_URL = floor.url // the SDK reads it in create
  const floorSbx = await Sandbox.create({ debug: true })
  process.env.E2B_SANDBOX_URL = envdURL
  for (let i = 0; i < 10; i++) {
    await sbx.commands.run('true')
    await floorSbx.commands.run('true')
    await direct()
  }
  const viaEnvd = []
  const viaFloor = []
  const viaSpawn = []
  for (let i = 0; i < runs; i++) {
    viaEnvd.push(await timed(() => sbx.commands.run('true')))
    viaFloor.push(await timed(() => floorSbx.commands.run('true')))
    viaSpawn.push(await timed(direct))
  }
  let e = median(viaEnvd)
  let d = median(viaSpawn)
  const f = median(viaFloor)
  console.log(`commands.run('true') via envd: median ${fmt(e)} ms over ${runs} runs`)
  console.log(`bash -l -c true spawned directly: median ${fmt(d)} ms over ${runs} runs`)
  console.log(`ratio envd/direct: ${fmt(e / d)}`)
  console.log(`for information: commands.run('true') via bench/spawnfloor (bare Go spawn, no cgroups): median ${fmt(f)} ms, ratio to direct ${fmt(f / d)}; envd over it ${fmt(e - f)} ms`)
  // For information: the SDK's own cost of one call, the smallest RPC
  // (commands.list(), nothing running), against the same Connect request
  // sent with node:http: what the SDK and fetch add is in envd's figure
  // above but not in the baseline's.
  const viaList = []
  const viaHTTP = []
  const listRaw = () => new Promise((resolve, reject) => {
    const req = http.request(`${process.env.E2B_SANDBOX_URL}/process.Process/List`, {
      method: 'POST', agent: keepAlive,
      headers: { 'Content-Type': 'application/json', Authorization: 'Basic ' + Buffer.from(`${user}:`).toString('base64') },
    }, (res) => { res.resume(); res.on('end', resolve) })
    req.on('error', reject)
    req.end('{}')
  })
  for (let i = 0; i < Math.min(runs, 100); i++) {
    viaList.push(await timed(() => sbx.commands.list()))
    viaHTTP.push(await timed(listRaw))
  }
  console.log(`for information: commands.list() through the SDK median ${fmt(median(viaList))} ms; the same request with node:http ${fmt(median(viaHTTP))} ms`)
  row('cmd', `${fmt(e)} ms`, `${fmt(d)} ms`, e / d)
  row('cmd-floor', `${fmt(f)} ms`, `${fmt(d)} ms`, f / d)

  // 100 at once: a warm-up round of each, then the rounds, interleaved.
  const all = (f) => Promise.all(Array.from({ length: concurrency }, () => timed(f)))
  await all(() => sbx.commands.run('true'))
  await all(direct)
  const cEnvd = []
  const cSpawn = []
  for (let i = 0; i < rounds; i++) {
    cEnvd.push(...(await all(() => sbx.commands.run('true'))))
    cSpawn.push(...(await all(direct)))
  }
  e = p99(cEnvd)
  d = p99(cSpawn)
  const n = rounds * concurrency
  console.log(`${concurrency} concurrent commands.run('true') via envd (one Sandbox): p99 ${fmt(e)} ms, median ${fmt(median(cEnvd))} ms over ${n} calls`)
  console.log(`${concurrency} concurrent bash -l -c true spawned directly:         p99 ${fmt(d)} ms, median ${fmt(median(cSpawn))} ms over ${n} spawns`)
  console.log(`ratio of p99s envd/direct: ${fmt(e / d)}; of medians: ${fmt(median(cEnvd) / median(cSpawn))}`)
  row('cmd100', `p99 ${fmt(e)} ms`, `p99 ${fmt(d)} ms`, e / d)
} finally {
  keepAlive.destroy()
  floor?.stop()
  await stopEnvd()
}
