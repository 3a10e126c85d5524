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
//     kernel_info reply), interleaved; goal: at most 1.2.
//
//   node bench/code.mjs [runs] [starts]      (ENVD_BIN to use a built binary)
import { spawn, execFileSync } from 'node:child_process'
import { createInterface } from 'node:readline'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { startEnvd, stopEnvd } from '../test/compat/harness.mjs'

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

await startEnvd({ jupyter: true, args: ['-log-level', 'warn'] })
let helper
try {
  const sbx = await Sandbox.create({ debug: true })
  const ctx = await sbx.createCodeContext()
  // The kernel tells where its connection file is and what environment it
  // started with; the baseline uses both.
  const info = await sbx.runCode(
    'import json, os\nfrom ipykernel import get_connection_file\n' +
      "json.dumps({'conn': get_connection_file(), 'env': {k: os.environ[k] for k in " +
      "('IPYTHONDIR', 'MATPLOTLIBRC', 'JUPYTER_PATH', 'JUPYTER_CONFIG_DIR', 'PATH', 'HOME', 'LANG', 'PYDEVD_DISABLE_FILE_VALIDATION') if k in os.environ}, " +
      "'uid': os.getuid(), 'gid': os.getgid()})",
    { context: ctx },
  )
  if (info.error) throw new Error(`kernel info: ${info.error.value}`)
  const { conn, env, uid, gid } = JSON.parse(info.text)

  // The baseline runs as the kernels' user, in their environment.
  helper = spawn('/usr/bin/python3', [path.join(here, 'code_kernel.py')], {
    uid,
    gid,
    cwd: '/',
    env: { ...env, PYTHONUNBUFFERED: '1' },
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const lines = createInterface({ input: helper.stdout })[Symbol.asyncIterator]()
  const ask = async (cmd) => {
    helper.stdin.write(cmd + '\n')
    const { value, done } = await lines.next()
    if (done) throw new Error(`baseline helper exited on ${cmd}`)
    return value
  }
  if ((await ask(`connect ${conn}`)) !== 'ok') throw new Error('baseline: connect failed')

  // Warm up both paths.
  for (let i = 0; i < 20; i++) {
    await sbx.runCode('x=1', { context: ctx })
    await ask('rt "x=1"')
  }
  const sdk = []
  const zmq = []
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint()
    const exe = await sbx.runCode('x=1', { context: ctx })
    sdk.push(ms(t0))
    if (exe.error) throw new Error(exe.error.value)
    zmq.push(Number(await ask('rt "x=1"')))
  }
  const a = median(sdk)
  const b = median(zmq)
  console.log(`runCode('x=1') through the SDK:    median ${fmt(a)} ms over ${runs} runs`)
  console.log(`same kernel over ZeroMQ directly:  median ${fmt(b)} ms over ${runs} runs`)
  console.log(`ratio ${fmt(a / b)} (goal <= 1.5)`)

  const create = []
  const boot = []
  for (let i = 0; i < starts; i++) {
    const t0 = process.hrtime.bigint()
    const c = await sbx.createCodeContext()
    create.push(ms(t0))
    await sbx.removeCodeContext(c)
    boot.push(Number(await ask('start')))
  }
  const c = median(create)
  const d = median(boot)
  console.log(`createCodeContext() through the SDK: median ${fmt(c)} ms over ${starts}`)
  console.log(`python3 kernel start (KernelManager): median ${fmt(d)} ms over ${starts}`)
  console.log(`ratio ${fmt(c / d)} (goal <= 1.2)`)
} finally {
  if (helper) {
    helper.stdin.end('quit\n')
    await new Promise((resolve) => helper.on('close', resolve))
  }
  await stopEnvd()
}
