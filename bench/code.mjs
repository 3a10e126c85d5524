// Benchmark: stateful code execution through the unmodified
// @e2b/code-interpreter SDK against a real envd (with Jupyter), versus the
// same kernel's own cost measured directly over its ZeroMQ sockets with
// Debian's jupyter_client (bench/code_kernel.py), in the same run:
//
//   - runCode('x=1') vs an execute_request of x=1 on the same kernel (the
//     SDK's context's kernel, through its connection file), interleaved run
//     for run; goal: ratio of medians at most 1.5;
//   - createCodeContext() vs starting the same python3 kernel with
//     jupyter_client's KernelManager and the same environment (start to
//     kernel_info reply), interleaved: first with envd's default prestarted
//     Python kernel (each context takes it and envd starts the next one in
//     the background; both sides wait for that refill to end before they
//     are timed, so that neither pays for it); goal: at most 0.1. Then
//     with a second envd started with -warm-kernels python=0, where each
//     context starts its kernel; goal: at most 1.2.
//
//   node bench/code.mjs [runs] [starts]      (ENVD_BIN to use a built binary)
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { startEnvd, stopEnvd, waitFor } from '../test/compat/harness.mjs'

const runs = Number(process.argv[2] || 200)
const starts = Number(process.argv[3] || 15)
const here = path.dirname(fileURLToPath(import.meta.url))
const require = createRequire(new URL('../test/compat/package.json', import.meta.url))
const { Sandbox } = await import(require.resolve('@e2b/code-interpreter'))

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6
const fmt = (x) => x.toFixed(2)
const verdict = (ratio, goal) => `ratio ${fmt(ratio)} (goal <= ${goal}) ${ratio <= goal ? 'MET' : 'MISSED'}`

// baseline starts bench/code_kernel.py as the kernels' user, in the
// environment the kernel of ctx started with (it tells both, and where its
// connection file is): the helper starts the same kernel envd would.
async function baseline(sbx, ctx) {
  const info = await sbx.runCode(
    'import json, os\nfrom ipykernel import get_connection_file\n' +
      "json.dumps({'conn': get_connection_file(), 'env': {k: os.environ[k] for k in " +
      "('IPYTHONDIR', 'MATPLOTLIBRC', 'JUPYTER_PATH', 'JUPYTER_CONFIG_DIR', 'PATH', 'HOME', 'LANG', 'PYDEVD_DISABLE_FILE_VALIDATION') if k in os.environ}, " +
      "'uid': os.getuid(), 'gid': os.getgid()})",
    { context: ctx },
  )
  if (info.error) throw new Error(`kernel info: ${info.error.value}`)
  const { conn, env, uid, gid } = JSON.parse(info.text)
  const helper = spawn('/usr/bin/python3', [path.join(here, 'code_kernel.py')], {
    uid,
    gid,
    cwd: '/',
    env: { ...env, PYTHONUNBUFFERED: '1' },
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const closed = new Promise((resolve) => helper.on('close', resolve))
  const lines = createInterface({ input: helper.stdout })[Symbol.asyncIterator]()
  const ask = async (cmd) => {
    helper.stdin.write(cmd + '\n')
    const { value, done } = await lines.next()
    if (done) throw new Error(`baseline helper exited on ${cmd}`)
    return value
  }
  const close = async () => {
    helper.stdin.end('quit\n')
    await closed
  }
  return { conn, ask, close }
}

// createStarts times createCodeContext() (then removes the context) and a
// KernelManager start, interleaved; with warm, each after envd's pool has
// its prestarted Python kernel again (GET /languages counts them).
async function createStarts(envd, sbx, ask, warm) {
  const refilled = () =>
    waitFor(
      async () => {
        const res = await fetch(`${envd.url}/languages`)
        if (!res.ok) throw new Error(`GET /languages: ${res.status} ${await res.text()}`)
        return ((await res.json()).find((l) => l.language === 'python')?.warm_kernels ?? 0) >= 1
      },
      { timeoutMs: 120000, intervalMs: 20, what: 'a prestarted python kernel' },
    )
  const create = []
  const boot = []
  for (let i = 0; i < starts; i++) {
    if (warm) await refilled()
    const t0 = process.hrtime.bigint()
    const c = await sbx.createCodeContext()
    create.push(ms(t0))
    await sbx.removeCodeContext(c)
    if (warm) await refilled() // the refill must not overlap the baseline
    boot.push(Number(await ask('start')))
  }
  return [median(create), median(boot)]
}

let helper
try {
  let envd = await startEnvd({ jupyter: true, args: ['-log-level', 'warn'] })
  let sbx = await Sandbox.create({ debug: true })
  let ctx = await sbx.createCodeContext()
  helper = await baseline(sbx, ctx)
  if ((await helper.ask(`connect ${helper.conn}`)) !== 'ok') throw new Error('baseline: connect failed')

  // Warm up both paths.
  for (let i = 0; i < 20; i++) {
    await sbx.runCode('x=1', { context: ctx })
    await helper.ask('rt "x=1"')
  }
  const sdk = []
  const zmq = []
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint()
    const exe = await sbx.runCode('x=1', { context: ctx })
    sdk.push(ms(t0))
    if (exe.error) throw new Error(exe.error.value)
    zmq.push(Number(await helper.ask('rt "x=1"')))
  }
  const a = median(sdk)
  const b = median(zmq)
  console.log(`runCode('x=1') through the SDK:    median ${fmt(a)} ms over ${runs} runs`)
  console.log(`same kernel over ZeroMQ directly:  median ${fmt(b)} ms over ${runs} runs`)
  console.log(`ratio ${fmt(a / b)} (goal <= 1.5)`)

  let [c, d] = await createStarts(envd, sbx, helper.ask, true)
  console.log(`createCodeContext() through the SDK, prestarted kernel:  median ${fmt(c)} ms over ${starts}`)
  console.log(`python3 kernel start (KernelManager):                    median ${fmt(d)} ms over ${starts}`)
  console.log(verdict(c / d, 0.1))

  // Without the pool: a second envd, and a helper in its kernels' environment.
  await helper.close()
  helper = undefined
  await stopEnvd()
  envd = await startEnvd({ jupyter: true, args: ['-log-level', 'warn', '-warm-kernels', 'python=0'] })
  sbx = await Sandbox.create({ debug: true })
  ctx = await sbx.createCodeContext()
  helper = await baseline(sbx, ctx)
  ;[c, d] = await createStarts(envd, sbx, helper.ask, false)
  console.log(`createCodeContext() through the SDK, -warm-kernels python=0: median ${fmt(c)} ms over ${starts}`)
  console.log(`python3 kernel start (KernelManager):                        median ${fmt(d)} ms over ${starts}`)
  console.log(verdict(c / d, 1.2))
} finally {
  if (helper) await helper.close()
  await stopEnvd()
}
