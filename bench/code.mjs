// Benchmark: stateful code execution through the unmodified
// @e2b/code-interpreter SDK against a real envd (with Jupyter), versus the
// kernels' own costs measured directly over their ZeroMQ sockets with
// Debian's jupyter_client (bench/code_kernel.py), in the same run:
//
//   - runCode('x=1') vs an execute_request of x=1 (to its execute_reply and
//     idle status, as the SDK waits for) on a plain python3 kernel: Debian's
//     own kernelspec, started by KernelManager with a fresh IPYTHONDIR and no
//     envd startup files (bench/kernel-helper.mjs); ratio of medians. Also
//     printed, with no goal: vs the same request on the same kernel as the
//     SDK's (its context's kernel, through its connection file), which
//     isolates envd's transport cost from its kernel-side code. The three
//     are interleaved run for run.
//   - createCodeContext() vs starting the same python3 kernel with
//     jupyter_client's KernelManager and the same environment (start to
//     kernel_info reply), interleaved: first with envd's default prestarted
//     Python kernel (each context takes it and envd starts the next one in
//     the background; both sides wait for that refill to end before they
//     are timed, so that neither pays for it). Then with a second envd
//     started with -warm-kernels python=0, where each context starts its
//     kernel.
//
// Prints ROW lines for bench/run.sh's table (code, code-same, ctx-warm,
// ctx-cold).
//
//   node bench/code.mjs [runs] [starts]      (ENVD_BIN to use a built binary)
import { createRequire } from 'node:module'
import { startEnvd, stopEnvd, waitFor } from '../test/compat/harness.mjs'
import { kernelHelper, plainKernel } from './kernel-helper.mjs'
import { fmt, median, ms } from './stats.mjs'

const runs = Number(process.argv[2] || 200)
const starts = Number(process.argv[3] || 15)
const require = createRequire(new URL('../test/compat/package.json', import.meta.url))
const { Sandbox } = await import(require.resolve('@e2b/code-interpreter'))

const row = (key, envd, base) => console.log(['ROW', key, `${fmt(envd)} ms`, `${fmt(base)} ms`, fmt(envd / base)].join('\t'))

// kernelInfo tells the user, environment and connection file of ctx's
// kernel.
async function kernelInfo(sbx, ctx) {
  const info = await sbx.runCode(
    'import json, os\nfrom ipykernel import get_connection_file\n' +
      "json.dumps({'conn': get_connection_file(), 'env': {k: os.environ[k] for k in " +
      "('IPYTHONDIR', 'MATPLOTLIBRC', 'JUPYTER_PATH', 'JUPYTER_CONFIG_DIR', 'PATH', 'HOME', 'LANG', 'PYDEVD_DISABLE_FILE_VALIDATION') if k in os.environ}, " +
      "'uid': os.getuid(), 'gid': os.getgid()})",
    { context: ctx },
  )
  if (info.error) throw new Error(`kernel info: ${info.error.value}`)
  return JSON.parse(info.text)
}

// baseline starts bench/code_kernel.py as the kernels' user, in the
// environment the kernel of ctx started with: the helper starts the same
// kernel envd would.
async function baseline(sbx, ctx) {
  const { conn, env, uid, gid } = await kernelInfo(sbx, ctx)
  return { conn, uid, gid, home: env.HOME ?? '/', ...kernelHelper({ env, uid, gid }) }
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
let plain
try {
  let envd = await startEnvd({ jupyter: true, args: ['-log-level', 'warn'] })
  let sbx = await Sandbox.create({ debug: true })
  let ctx = await sbx.createCodeContext()
  helper = await baseline(sbx, ctx)
  if ((await helper.ask(`connect ${helper.conn}`)) !== 'ok') throw new Error('baseline: connect failed')
  plain = await plainKernel(helper)

  // Warm up every path.
  for (let i = 0; i < 20; i++) {
    await sbx.runCode('x=1', { context: ctx })
    await plain.ask('rt "x=1"')
    await helper.ask('rt "x=1"')
  }
  const sdk = []
  const toPlain = []
  const toSame = []
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint()
    const exe = await sbx.runCode('x=1', { context: ctx })
    sdk.push(ms(t0))
    if (exe.error) throw new Error(exe.error.value)
    toPlain.push(Number(await plain.ask('rt "x=1"')))
    toSame.push(Number(await helper.ask('rt "x=1"')))
  }
  await plain.close()
  plain = undefined
  const a = median(sdk)
  const b = median(toPlain)
  const c = median(toSame)
  console.log(`runCode('x=1') through the SDK:           median ${fmt(a)} ms over ${runs} runs`)
  console.log(`plain python3 kernel over ZeroMQ:         median ${fmt(b)} ms over ${runs} runs; ratio ${fmt(a / b)}`)
  console.log(`envd's same kernel over ZeroMQ directly:  median ${fmt(c)} ms over ${runs} runs; ratio ${fmt(a / c)}`)
  row('code', a, b)
  row('code-same', a, c)

  let [e, d] = await createStarts(envd, sbx, helper.ask, true)
  console.log(`createCodeContext() through the SDK, prestarted kernel:  median ${fmt(e)} ms over ${starts}`)
  console.log(`python3 kernel start (KernelManager):                    median ${fmt(d)} ms over ${starts}; ratio ${fmt(e / d)}`)
  row('ctx-warm', e, d)

  // Without the pool: a second envd, and a helper in its kernels' environment.
  await helper.close()
  helper = undefined
  await stopEnvd()
  envd = await startEnvd({ jupyter: true, args: ['-log-level', 'warn', '-warm-kernels', 'python=0'] })
  sbx = await Sandbox.create({ debug: true })
  ctx = await sbx.createCodeContext()
  helper = await baseline(sbx, ctx)
  ;[e, d] = await createStarts(envd, sbx, helper.ask, false)
  console.log(`createCodeContext() through the SDK, -warm-kernels python=0: median ${fmt(e)} ms over ${starts}`)
  console.log(`python3 kernel start (KernelManager):                        median ${fmt(d)} ms over ${starts}; ratio ${fmt(e / d)}`)
  row('ctx-cold', e, d)
} finally {
  if (plain) await plain.close()
  if (helper) await helper.close()
  await stopEnvd()
}
