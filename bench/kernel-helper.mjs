// Drives bench/code_kernel.py, the direct baselines of bench/code.mjs and
// bench/start.mjs: a Python process with Debian's jupyter_client that answers
// one line per command (see its docstring).
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))

/** Debian's own python3 kernelspec: what a plain kernel must be started from. */
export const DEBIAN_PYTHON3 = '/usr/share/jupyter/kernels/python3'

/**
 * Start bench/code_kernel.py as uid:gid in env. Returns { ask(cmd) -> line,
 * close() }.
 */
export function kernelHelper({ env, uid, gid }) {
  const child = spawn('/usr/bin/python3', [path.join(here, 'code_kernel.py')], {
    uid,
    gid,
    cwd: '/',
    env: { ...env, PYTHONUNBUFFERED: '1' },
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const closed = new Promise((resolve) => child.on('close', resolve))
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
  const ask = async (cmd) => {
    child.stdin.write(cmd + '\n')
    const { value, done } = await lines.next()
    if (done) throw new Error(`kernel helper exited on ${cmd}`)
    return value
  }
  const close = async () => {
    child.stdin.end('quit\n')
    await closed
  }
  return { ask, close }
}

/**
 * A plain kernel's environment, for uid:gid whose home is home: no envd
 * startup files, no IPython or Jupyter configuration of anyone's (fresh
 * IPYTHONDIR, JUPYTER_CONFIG_DIR, JUPYTER_DATA_DIR and JUPYTER_RUNTIME_DIR
 * in a new directory, no JUPYTER_PATH), so that KernelManager starts
 * Debian's own python3 kernelspec as it is. Returns { env, dispose() }.
 */
export function plainKernelEnv({ uid, gid, home }) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-bench-plain-'))
  const sub = {}
  for (const [k, name] of [
    ['IPYTHONDIR', 'ipython'],
    ['JUPYTER_CONFIG_DIR', 'config'],
    ['JUPYTER_DATA_DIR', 'data'],
    ['JUPYTER_RUNTIME_DIR', 'runtime'],
  ]) {
    sub[k] = path.join(dir, name)
    fs.mkdirSync(sub[k])
    fs.chownSync(sub[k], uid, gid)
  }
  fs.chownSync(dir, uid, gid)
  // PYDEVD_DISABLE_FILE_VALIDATION only silences debugpy's warning about
  // frozen modules on stderr (envd sets it too).
  const env = { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: home, LANG: 'C.UTF-8', PYDEVD_DISABLE_FILE_VALIDATION: '1', ...sub }
  return { env, dispose: () => fs.rmSync(dir, { recursive: true, force: true }) }
}

/**
 * A helper with a plain python3 kernel of its own, launched and connected
 * (checked to be Debian's kernelspec). Returns the helper, with dispose().
 */
export async function plainKernel({ uid, gid, home }) {
  const plain = plainKernelEnv({ uid, gid, home })
  const h = kernelHelper({ env: plain.env, uid, gid })
  try {
    const got = await h.ask('launch')
    if (got !== `ok ${DEBIAN_PYTHON3}`) throw new Error(`plain kernel: launch answered ${JSON.stringify(got)}, want "ok ${DEBIAN_PYTHON3}"`)
  } catch (err) {
    await h.close()
    plain.dispose()
    throw err
  }
  return {
    ask: h.ask,
    close: async () => {
      await h.close()
      plain.dispose()
    },
  }
}
