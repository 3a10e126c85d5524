// Who acts, through the unmodified SDKs: the behaviours of upstream's own
// suites that depend on envd's users, in both modes.
//
// Default mode (upstream's behaviour): writing /0/file.txt as the default
// user creates /0 for that user, and both belong to it; Jupyter's kernels run
// as root, so a context may use cwd /root and the kernel says it is root.
//
// Strict mode (ENVD_COMPAT_STRICT=1, envd -strict-users): the documented
// differences. The same write is refused (`user` may not create /0, as in a
// shell), a context in /root is refused (the kernels run as `user`, who
// cannot enter it), and the kernel says it is `user`.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import { Sandbox } from '@e2b/code-interpreter'
import { KERNEL_USER, STRICT, dumpLogOnFailure, rejection, startEnvd, stopEnvd } from './harness.mjs'

const T = { timeout: 60000 }
// /0 is this test's alone: nothing else on a test machine has it.
const ZERO = '/0'

describe(`identity (${STRICT ? 'strict' : 'default'} mode)`, () => {
  /** @type {Sandbox} */
  let sbx

  before(async () => {
    try {
      execFileSync('id', ['-u', 'user'])
    } catch {
      assert.fail("account 'user' is missing: run scripts/install-deps.sh")
    }
    fs.rmSync(ZERO, { recursive: true, force: true }) // left by an aborted run
    await startEnvd({ jupyter: true })
    sbx = await Sandbox.create({ debug: true })
  })
  after(async () => {
    fs.rmSync(ZERO, { recursive: true, force: true })
    await stopEnvd()
  })
  afterEach((t) => dumpLogOnFailure(t))

  // stat -c %U, as root: owners even where `user` could not look.
  const ownerOf = async (p) => (await sbx.commands.run(`stat -c %U ${p}`, { user: 'root' })).stdout.trim()

  it("files.write('/0/file.txt') as the default user", T, async () => {
    try {
      if (STRICT) {
        const err = await rejection(sbx.files.write(`${ZERO}/file.txt`, 'zero'), 'the write of /0/file.txt as user')
        assert.match(err.message, /403|permission denied/i)
        assert.equal(fs.existsSync(ZERO), false, '/0 was created for a refused write')
        return
      }
      const entry = await sbx.files.write(`${ZERO}/file.txt`, 'zero')
      assert.equal(entry.path, `${ZERO}/file.txt`)
      assert.equal(await sbx.files.read(`${ZERO}/file.txt`), 'zero')
      assert.equal(fs.readFileSync(`${ZERO}/file.txt`, 'utf8'), 'zero')
      assert.equal(await ownerOf(ZERO), 'user')
      assert.equal(await ownerOf(`${ZERO}/file.txt`), 'user')
      assert.equal((await sbx.files.getInfo(ZERO)).owner, 'user')
      assert.equal((await sbx.files.getInfo(`${ZERO}/file.txt`)).owner, 'user')
    } finally {
      fs.rmSync(ZERO, { recursive: true, force: true })
    }
  })

  it("createCodeContext({ cwd: '/root' })", T, async () => {
    if (STRICT) {
      const err = await rejection(sbx.createCodeContext({ cwd: '/root' }), 'a context in /root with kernels as user')
      // The SDK keeps only the status of a 400 (envd's text says why).
      assert.match(err.message, /400/)
      assert.ok(!(await sbx.listCodeContexts()).some((c) => c.cwd === '/root'), 'a context in /root exists')
      return
    }
    const ctx = await sbx.createCodeContext({ cwd: '/root' })
    try {
      assert.equal(ctx.cwd, '/root')
      const exe = await sbx.runCode('import os\nprint(os.getcwd())', { context: ctx })
      assert.equal(exe.error, undefined, exe.error?.value)
      assert.equal(exe.logs.stdout.join('').trim(), '/root')
    } finally {
      await sbx.removeCodeContext(ctx)
    }
  })

  it(`the kernels run as ${KERNEL_USER}`, T, async () => {
    const exe = await sbx.runCode('import getpass\nprint(getpass.getuser())')
    assert.equal(exe.error, undefined, exe.error?.value)
    assert.deepEqual(exe.logs.stdout, [`${KERNEL_USER}\n`])
    // getpass reads $USER first: the uid itself, and a shell's whoami.
    const ids = await sbx.runCode(
      'import os, pwd, subprocess\nprint(pwd.getpwuid(os.geteuid()).pw_name)\nprint(subprocess.run(["whoami"], capture_output=True, text=True, check=True).stdout, end="")',
    )
    assert.equal(ids.error, undefined, ids.error?.value)
    assert.deepEqual(ids.logs.stdout.join('').split('\n'), [KERNEL_USER, KERNEL_USER, ''])
  })

  it('the default context still starts in /home/user', T, async () => {
    const exe = await sbx.runCode('import os\nprint(os.getcwd())')
    assert.equal(exe.logs.stdout.join('').trim(), '/home/user')
  })
})
