// Benchmark: commands.run('true') through the unmodified e2b SDK against a
// real envd, versus spawning the same `/bin/bash -l -c true` as the same user
// straight from this Node process. The two are interleaved, run for run, so
// machine noise hits both alike; the figure that matters is the ratio.
//
//   node bench/sdk-commands.mjs [runs]      (ENVD_BIN to use a built binary)
import { spawn, execFileSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { startEnvd, stopEnvd } from '../test/compat/harness.mjs'

const runs = Number(process.argv[2] || 200)
const require = createRequire(new URL('../test/compat/package.json', import.meta.url))
const { Sandbox } = await import(require.resolve('e2b'))

// The SDK names no user, so envd runs commands as its default user: `user`
// when that account exists. Spawn the baseline as the same account, with the
// same kind of environment envd gives it.
const user = 'user'
const uid = Number(execFileSync('id', ['-u', user]).toString())
const gid = Number(execFileSync('id', ['-g', user]).toString())
const home = `/home/${user}`
const env = { PATH: process.env.PATH, HOME: home, USER: user, LOGNAME: user, SHELL: '/bin/bash' }

function direct() {
  return new Promise((resolve, reject) => {
    const c = spawn('/bin/bash', ['-l', '-c', 'true'], { uid, gid, cwd: home, env, stdio: ['ignore', 'pipe', 'pipe'] })
    c.stdout.resume()
    c.stderr.resume()
    c.on('error', reject)
    c.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`bash exited ${code}`))))
  })
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6

await startEnvd()
try {
  const sbx = await Sandbox.create({ debug: true })
  for (let i = 0; i < 10; i++) {
    await sbx.commands.run('true')
    await direct()
  }
  const viaEnvd = []
  const viaSpawn = []
  for (let i = 0; i < runs; i++) {
    let t0 = process.hrtime.bigint()
    await sbx.commands.run('true')
    viaEnvd.push(ms(t0))
    t0 = process.hrtime.bigint()
    await direct()
    viaSpawn.push(ms(t0))
  }
  const e = median(viaEnvd)
  const d = median(viaSpawn)
  console.log(`commands.run('true') via envd: median ${e.toFixed(2)} ms over ${runs} runs`)
  console.log(`bash -l -c true spawned directly: median ${d.toFixed(2)} ms over ${runs} runs`)
  console.log(`ratio envd/direct: ${(e / d).toFixed(2)} (goal <= 1.3)`)
} finally {
  await stopEnvd()
}
