// PTYs through the unmodified e2b SDK (debug mode) against our envd.
// Checks 17-19 of docs/wire.md ("Compatibility checks").
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, Sandbox } from 'e2b'
import { dumpLogOnFailure, rejection, startEnvd, stopEnvd, waitFor } from './harness.mjs'

const T = { timeout: 30000 }
const enc = new TextEncoder()

/** A PTY whose output is collected as text. */
async function openPty(sbx, opts = {}) {
  const dec = new TextDecoder()
  const term = { out: '' }
  term.handle = await sbx.pty.create({
    cols: 80,
    rows: 24,
    onData: (d) => {
      assert.ok(d instanceof Uint8Array, 'onData gets a Uint8Array')
      term.out += dec.decode(d, { stream: true })
    },
    ...opts,
  })
  term.send = (s) => sbx.pty.sendInput(term.handle.pid, enc.encode(s))
  term.waitOutput = (re, what) =>
    waitFor(() => re.test(term.out), { timeoutMs: 10000, what: `${what} in pty output ${JSON.stringify(term.out)}` })
  return term
}

describe('pty', () => {
  /** @type {Sandbox} */
  let sbx
  const open = []

  before(async () => {
    await startEnvd()
    sbx = await Sandbox.create({ debug: true })
  })
  after(async () => {
    for (const t of open) await sbx.pty.kill(t.handle.pid).catch(() => {})
    await stopEnvd()
  })
  afterEach((t) => dumpLogOnFailure(t))

  it('create with size, TERM, resize, exit code (checks 17 and 18)', T, async () => {
    const term = await openPty(sbx)
    open.push(term)
    assert.ok(Number.isInteger(term.handle.pid) && term.handle.pid > 0)

    await term.send('stty size; echo $TERM\n')
    await term.waitOutput(/(^|[\r\n])24 80\r?\n/, "'24 80'")
    await term.waitOutput(/(^|[\r\n])xterm-256color\r?\n/, "'xterm-256color'")

    await sbx.pty.resize(term.handle.pid, { cols: 100, rows: 30 })
    await term.send('stty size; exit 5\n')
    const e = await rejection(term.handle.wait(), 'pty wait()')
    assert.ok(e instanceof CommandExitError, `got ${e?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 5)
    assert.equal(e.error, 'exit status 5')
    assert.match(term.out, /(^|[\r\n])30 100\r?\n/)
    // PTY output arrives as pty data, not as stdout/stderr
    assert.equal(e.stdout, '')
    assert.equal(e.stderr, '')
  })

  it('runs as the default user in its home, with the SDK locale', T, async () => {
    const term = await openPty(sbx)
    open.push(term)
    await term.send('echo "me=$(whoami) at=$(pwd) lang=$LANG"; exit\n')
    const r = await term.handle.wait()
    assert.equal(r.exitCode, 0)
    assert.match(term.out, /me=user at=\/home\/user lang=C\.UTF-8/)
  })

  it('cwd and envs apply to the shell', T, async () => {
    const term = await openPty(sbx, { cwd: '/tmp', envs: { COMPAT_PTY: 'yes' } })
    open.push(term)
    await term.send('echo "dir=$(pwd) env=$COMPAT_PTY"; exit 0\n')
    const r = await term.handle.wait()
    assert.equal(r.exitCode, 0)
    assert.match(term.out, /dir=\/tmp env=yes/)
  })

  it('kill a fresh PTY -> true, wait gives exit code -1 (check 19)', T, async () => {
    const term = await openPty(sbx)
    open.push(term)
    assert.equal(await sbx.pty.kill(term.handle.pid), true)
    const e = await rejection(term.handle.wait(), 'pty wait() after kill')
    assert.ok(e instanceof CommandExitError, `got ${e?.name}: ${e?.message}`)
    assert.equal(e.exitCode, -1)
    assert.equal(e.error, 'signal: killed')
    assert.equal(await sbx.pty.kill(term.handle.pid), false)
  })
})
