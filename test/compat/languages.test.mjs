// Languages through the unmodified @e2b/code-interpreter SDK (debug mode):
// the default contexts listed at start (python and javascript, as upstream's
// server has both from the start; envd starts the JavaScript kernel on first
// use), a language served by a kernelspec the test installs (a second Python
// kernelspec under another name, in a temp directory given to envd through
// JUPYTER_PATH, before and after envd started), and envd's language list
// (GET /languages).
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox, SandboxError } from '@e2b/code-interpreter'
import { KERNEL_USER, dumpLogOnFailure, rejection, startEnvd, stopEnvd } from './harness.mjs'

const T = { timeout: 60000 }

// Kernelspec names of this run (Jupyter lowercases them).
const SECOND = 'envd-compat-python-second'
const LATE = 'envd-compat-python-late'

/** Write JUPYTER_PATH/kernels/name/kernel.json: Debian's ipykernel. */
function installSpec(jupyterPath, name, display) {
  const dir = path.join(jupyterPath, 'kernels', name)
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 })
  fs.chmodSync(dir, 0o755)
  fs.writeFileSync(
    path.join(dir, 'kernel.json'),
    JSON.stringify({
      argv: ['/usr/bin/python3', '-m', 'ipykernel_launcher', '-f', '{connection_file}'],
      display_name: display,
      language: 'python',
    }),
    { mode: 0o644 },
  )
}

describe('languages', () => {
  /** @type {Sandbox} */
  let sbx
  let envd
  let jupyterPath // a temp JUPYTER_PATH entry (readable by the kernels' user)
  let scratch // a directory the kernels' user can enter

  before(async () => {
    jupyterPath = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-compat-kernels-'))
    fs.chmodSync(jupyterPath, 0o755)
    fs.mkdirSync(path.join(jupyterPath, 'kernels'), { mode: 0o755 })
    installSpec(jupyterPath, SECOND, 'Python (second)')
    scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-lang-'))
    fs.chmodSync(scratch, 0o755)
    envd = await startEnvd({ jupyter: true, env: { JUPYTER_PATH: jupyterPath } })
    sbx = await Sandbox.create({ debug: true })
  })
  after(async () => {
    await stopEnvd()
    fs.rmSync(jupyterPath, { recursive: true, force: true })
    fs.rmSync(scratch, { recursive: true, force: true })
  })
  afterEach((t) => dumpLogOnFailure(t))

  /** GET /languages on envd's main port. */
  async function languages() {
    const res = await fetch(`${envd.url}/languages`)
    assert.equal(res.status, 200, await res.clone().text())
    assert.match(res.headers.get('content-type'), /^application\/json/)
    return res.json()
  }

  it('default contexts at start: python and javascript, with stable ids; javascript works on first use', T, async () => {
    const first = await sbx.listCodeContexts()
    assert.deepEqual(
      first.map((c) => c.language),
      ['python', 'javascript'],
    )
    for (const c of first) {
      assert.match(c.id, /^[0-9a-f-]{36}$/)
      assert.equal(c.cwd, '/home/user')
    }
    const second = await sbx.listCodeContexts()
    assert.deepEqual(second, first)
    const js = first.find((c) => c.language === 'javascript')

    // Listed before its kernel exists.
    const before = (await languages()).find((l) => l.language === 'javascript')
    assert.equal(before.default_context_id, js.id)
    assert.equal(before.default_context_running, false)

    // First use by the listed id, then by language: the same context.
    const set = await sbx.runCode('var listed = 41', { context: js })
    assert.equal(set.error, undefined)
    const get = await sbx.runCode('listed + 1', { language: 'js' })
    assert.equal(get.text, '42')
    const cwd = await sbx.runCode('console.log(Deno.cwd())', { language: 'javascript' })
    assert.deepEqual(cwd.logs.stdout, ['/home/user\n'])

    assert.deepEqual(await sbx.listCodeContexts(), first)
    const running = (await languages()).find((l) => l.language === 'javascript')
    assert.equal(running.default_context_id, js.id)
    assert.equal(running.default_context_running, true)
  })

  it('a second Python kernelspec from JUPYTER_PATH is usable by its name', T, async () => {
    const who = await sbx.runCode('import getpass, sys; print(getpass.getuser(), sys.version_info[0])', { language: SECOND })
    assert.equal(who.error, undefined)
    assert.deepEqual(who.logs.stdout, [`${KERNEL_USER} 3\n`])

    // Its own default context keeps state, apart from python's.
    await sbx.runCode('only_second = 1', { language: SECOND })
    const there = await sbx.runCode('only_second + 1', { language: SECOND })
    assert.equal(there.text, '2')
    const notInPython = await sbx.runCode('only_second')
    assert.equal(notInPython.error?.name, 'NameError')

    // Per-execution env vars, and a context with a cwd, as in any Python.
    const env = await sbx.runCode('import os; os.environ["FOO"]', { language: SECOND, envs: { FOO: 'bar' } })
    assert.equal(env.text, 'bar')
    const ctx = await sbx.createCodeContext({ language: SECOND, cwd: scratch })
    assert.equal(ctx.language, SECOND)
    assert.equal(ctx.cwd, scratch)
    const cwd = await sbx.runCode('import os; os.getcwd()', { context: ctx })
    assert.equal(cwd.text, scratch)
    const list = await sbx.listCodeContexts()
    assert.ok(list.some((c) => c.id === ctx.id && c.language === SECOND))
    await sbx.removeCodeContext(ctx)
  })

  it('a kernelspec installed after start is usable at once; an unknown language names the available ones', T, async () => {
    const err = await rejection(sbx.runCode('1', { language: LATE }), 'a run in a language not installed yet')
    assert.ok(err instanceof SandboxError, `got ${err}`)
    assert.match(err.message, /400/)
    // The SDK keeps only the status; the body says what can run.
    const res = await fetch(`${envd.url}/execute`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ code: '1', language: LATE }),
    })
    const body = await res.text()
    assert.equal(res.status, 400, body)
    assert.match(body, new RegExp(`unsupported language "${LATE}"`))
    assert.match(body, new RegExp(`available languages: python, javascript, typescript, r, bash, .*${SECOND}`))

    installSpec(jupyterPath, LATE, 'Python (late)')
    const exe = await sbx.runCode('print("late")', { language: LATE })
    assert.deepEqual(exe.logs.stdout, ['late\n'])
  })

  it('GET /languages lists every language with its kernelspec, aliases and default context', T, async () => {
    const list = await languages()
    const byName = Object.fromEntries(list.map((l) => [l.language, l]))
    assert.deepEqual(
      list.slice(0, 5).map((l) => l.language),
      ['python', 'javascript', 'typescript', 'r', 'bash'],
    )
    assert.equal(byName.python.kernel_name, 'python3')
    assert.deepEqual(byName.python.aliases, ['py', 'python3'])
    assert.equal(byName.python.default_context_running, true)
    assert.equal(byName.javascript.kernel_name, 'deno')
    assert.deepEqual(byName.javascript.aliases, ['js', 'deno'])
    assert.equal(byName.typescript.kernel_name, 'deno')
    assert.deepEqual(byName.typescript.aliases, ['ts'])

    const contexts = await sbx.listCodeContexts()
    assert.equal(byName.python.default_context_id, contexts[0].id)

    const second = byName[SECOND]
    assert.ok(second, `${SECOND} missing from ${JSON.stringify(list)}`)
    assert.equal(second.kernel_name, SECOND)
    assert.equal(second.display_name, 'Python (second)')
    assert.deepEqual(second.aliases, [])
    assert.ok(contexts.some((c) => c.id === second.default_context_id && c.language === SECOND))
    assert.equal(byName[LATE]?.kernel_name, LATE)
  })
})
