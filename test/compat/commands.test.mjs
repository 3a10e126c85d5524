// Commands through the unmodified e2b SDK (debug mode) against our envd.
// Checks 1-16 of docs/wire.md ("Compatibility checks"), with the default
// user being `user` (home /home/user): envd runs as root and that account exists.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import {
  AuthenticationError,
  CommandExitError,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  SandboxError,
  TimeoutError,
} from 'e2b'
import { dumpLogOnFailure, rejection, sleep, startEnvd, stopEnvd, waitFor } from './harness.mjs'

const T = { timeout: 30000 }

function localId(...args) {
  return execFileSync('id', args, { encoding: 'utf8' }).trim()
}

describe('commands', () => {
  /** @type {Sandbox} */
  let sbx
  let userUid

  before(async () => {
    try {
      userUid = localId('-u', 'user')
    } catch {
      assert.fail("account 'user' is missing: run scripts/install-deps.sh")
    }
    await startEnvd()
    sbx = await Sandbox.create({ debug: true })
  })
  after(() => stopEnvd())
  afterEach((t) => dumpLogOnFailure(t))

  it('Sandbox.create({debug:true}) gives the debug sandbox id (check 1)', T, () => {
    assert.equal(sbx.sandboxId, 'debug_sandbox_id')
  })

  it('the SDK sends envd calls to E2B_SANDBOX_URL (our envd)', T, async () => {
    const url = await sbx.downloadUrl('/tmp/a.txt')
    assert.equal(url, `${process.env.E2B_SANDBOX_URL}/files?path=%2Ftmp%2Fa.txt`)
  })

  it('isRunning() probes GET /health (check 2)', T, async () => {
    assert.equal(await sbx.isRunning(), true)
  })

  it('Sandbox.connect(id, {debug:true}) works without a control plane (check 3)', T, async () => {
    const other = await Sandbox.connect('any-id', { debug: true })
    assert.equal(other.sandboxId, 'any-id')
    const r = await other.commands.run('echo connected')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'connected\n')
  })

  it('run: stdout and stderr, with callbacks (check 4)', T, async () => {
    const out = []
    const err = []
    const r = await sbx.commands.run('echo hello; echo err 1>&2', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => err.push(d),
    })
    assert.equal(r.exitCode, 0)
    assert.equal(r.error, undefined)
    assert.equal(r.stdout, 'hello\n')
    assert.equal(r.stderr, 'err\n')
    assert.equal(out.join(''), 'hello\n')
    assert.equal(err.join(''), 'err\n')
  })

  it('run: larger output arrives complete and in order', T, async () => {
    const r = await sbx.commands.run('seq 1 20000')
    const want = Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join('')
    assert.equal(r.stdout.length, want.length)
    assert.equal(r.stdout, want)
  })

  it('run: nonzero exit rejects with CommandExitError (check 5)', T, async () => {
    const e = await rejection(sbx.commands.run('echo partial; exit 3'))
    assert.ok(e instanceof CommandExitError, `got ${e?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 3)
    assert.equal(e.error, 'exit status 3')
    assert.equal(e.message, 'exit status 3')
    assert.equal(e.stdout, 'partial\n')
    assert.equal(e.stderr, '')
  })

  it('run: cwd and envs (check 6)', T, async () => {
    const r = await sbx.commands.run('pwd; echo $FOO', { cwd: '/tmp', envs: { FOO: 'bar' } })
    assert.equal(r.stdout, '/tmp\nbar\n')
    // request envs are not remembered for later commands
    const r2 = await sbx.commands.run('echo "${FOO-unset}"')
    assert.equal(r2.stdout, 'unset\n')
  })

  it('run: default user is `user` in /home/user (check 7)', T, async () => {
    const r = await sbx.commands.run('whoami; pwd; id -u; echo "$HOME $USER $LOGNAME"')
    assert.equal(r.stdout, `user\n/home/user\n${userUid}\n/home/user user user\n`)
  })

  it('run: relative cwd resolves against the home; ~ expands', T, async () => {
    const r = await sbx.commands.run('pwd', { cwd: '~' })
    assert.equal(r.stdout, '/home/user\n')
    const r2 = await sbx.commands.run('mkdir -p compat-rel && cd compat-rel && pwd')
    assert.equal(r2.stdout, '/home/user/compat-rel\n')
    const r3 = await sbx.commands.run('pwd', { cwd: 'compat-rel' })
    assert.equal(r3.stdout, '/home/user/compat-rel\n')
    await sbx.commands.run('rmdir compat-rel')
  })

  it("run: user 'root' runs as root (check 8)", T, async () => {
    const r = await sbx.commands.run('whoami; pwd; id -u; echo $HOME', { user: 'root' })
    assert.equal(r.stdout, 'root\n/root\n0\n/root\n')
  })

  it('run: unknown user -> AuthenticationError (check 8)', T, async () => {
    const e = await rejection(sbx.commands.run('whoami', { user: 'nosuchuser' }))
    assert.ok(e instanceof AuthenticationError, `got ${e?.name}: ${e?.message}`)
    assert.match(e.message, /nosuchuser/)
  })

  it('run: missing cwd -> InvalidArgumentError (check 8)', T, async () => {
    const e = await rejection(sbx.commands.run('pwd', { cwd: '/nonexistent/dir' }))
    assert.ok(e instanceof InvalidArgumentError, `got ${e?.name}: ${e?.message}`)
    assert.match(e.message, /\/nonexistent\/dir/)
  })

  it('run: timeoutMs kills the command -> TimeoutError, gone from list (check 9)', T, async () => {
    const marker = `compat-timeout-${process.pid}-${Date.now()}`
    const t0 = Date.now()
    const e = await rejection(sbx.commands.run(`sleep 5; echo ${marker}`, { timeoutMs: 1000 }))
    const took = Date.now() - t0
    assert.ok(e instanceof TimeoutError, `got ${e?.name}: ${e?.message}`)
    assert.ok(took >= 900 && took < 4000, `TimeoutError after ${took} ms, want ~1000`)
    await waitFor(
      async () => !(await sbx.commands.list()).some((p) => p.args.some((a) => a.includes(marker))),
      { timeoutMs: 3000, what: 'the timed-out command to leave commands.list()' },
    )
    // and the bash itself is really gone (not just unlisted)
    const ps = await sbx.commands.run(`ps -eo args | grep -c '[c]ompat-timeout-${process.pid}' || true`)
    assert.equal(ps.stdout.trim(), '0')
  })

  it('background: list, connect, kill, wait (check 10)', T, async () => {
    const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 })
    assert.ok(Number.isInteger(h.pid) && h.pid > 0, `pid ${h.pid}`)

    const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid)
    assert.ok(listed, `pid ${h.pid} not in commands.list()`)
    assert.equal(listed.cmd, '/bin/bash')
    assert.deepEqual(listed.args, ['-l', '-c', 'sleep 30'])

    const h2 = await sbx.commands.connect(h.pid)
    assert.equal(h2.pid, h.pid)

    assert.equal(await sbx.commands.kill(h.pid), true)

    for (const [name, handle] of [['run handle', h], ['connect handle', h2]]) {
      const e = await rejection(handle.wait(), `${name}.wait()`)
      assert.ok(e instanceof CommandExitError, `${name}: got ${e?.name}: ${e?.message}`)
      assert.equal(e.exitCode, -1, name)
      assert.equal(e.error, 'signal: killed', name)
    }

    assert.equal(await sbx.commands.kill(h.pid), false)
    assert.equal((await sbx.commands.list()).some((p) => p.pid === h.pid), false)
  })

  it('kill(999999) -> false (check 10)', T, async () => {
    assert.equal(await sbx.commands.kill(999999), false)
  })

  it('handle.kill() returns true, then false', T, async () => {
    const h = await sbx.commands.run('sleep 30', { background: true })
    assert.equal(await h.kill(), true)
    const e = await rejection(h.wait())
    assert.equal(e.exitCode, -1)
    assert.equal(await h.kill(), false)
  })

  it('stdin: sendStdin + closeStdin on cat (check 11)', T, async () => {
    const c = await sbx.commands.run('cat', { background: true, stdin: true })
    await c.sendStdin('abc\n')
    await sbx.commands.sendStdin(c.pid, new TextEncoder().encode('def'))
    await c.closeStdin()
    const r = await c.wait()
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'abc\ndef')
    assert.equal(r.stderr, '')
  })

  it('stdin: sendStdin without stdin -> SandboxError (check 12)', T, async () => {
    const h = await sbx.commands.run('sleep 3', { background: true })
    try {
      const e = await rejection(h.sendStdin('x'))
      assert.ok(e instanceof SandboxError, `got ${e?.name}: ${e?.message}`)
      assert.equal(e.name, 'SandboxError')
      // Upstream answers `internal`; envd answers the more precise
      // `failed_precondition` (the process is fine, its stdin is not open),
      // which the SDK surfaces as the same SandboxError class.
      assert.match(e.message, /failed_precondition.*stdin of process \d+ is not enabled or already closed/)
    } finally {
      await h.kill()
      await h.wait().catch(() => {})
    }
  })

  it('disconnect + reconnect replays the missed output (check 13, envd replays)', T, async () => {
    const first = []
    const h = await sbx.commands.run('for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.5; done', {
      background: true,
      onStdout: (d) => first.push(d),
    })
    await sleep(700)
    await h.disconnect()
    const seenBefore = first.join('')
    await sleep(1200) // tick3 and tick4 are printed while nobody is attached

    const second = []
    const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => second.push(d) })
    const r = await h2.wait()

    const all = 'tick1\ntick2\ntick3\ntick4\ntick5\ntick6\n'
    assert.ok(seenBefore.startsWith('tick1\n'), `before disconnect: ${JSON.stringify(seenBefore)}`)
    assert.ok(!seenBefore.includes('tick4'), `before disconnect: ${JSON.stringify(seenBefore)}`)
    assert.equal(first.join(''), seenBefore, 'the disconnected handle got more output')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, all)
    assert.equal(second.join(''), all)
  })

  it('connect after exit (within retention) gives the exit code (check 14)', T, async () => {
    const h = await sbx.commands.run('echo x; exit 7', { background: true })
    await h.disconnect()
    await sleep(500)
    const h2 = await sbx.commands.connect(h.pid)
    const e = await rejection(h2.wait())
    assert.ok(e instanceof CommandExitError, `got ${e?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 7)
    assert.equal(e.error, 'exit status 7')
  })

  it('connect(999999) -> NotFoundError (check 15)', T, async () => {
    const e = await rejection(sbx.commands.connect(999999))
    assert.ok(e instanceof NotFoundError, `got ${e?.name}: ${e?.message}`)
    assert.match(e.message, /999999/)
  })

  it('a detached background child does not hold the command open (check 16)', T, async () => {
    const t0 = Date.now()
    const r = await sbx.commands.run('sleep 3 >/dev/null 2>&1 & echo started')
    const took = Date.now() - t0
    assert.equal(r.stdout, 'started\n')
    assert.ok(took < 1500, `took ${took} ms, want well under the child's 3 s`)
  })

  it('a background child holding stdout keeps the command open (check 16)', T, async () => {
    const t0 = Date.now()
    const r = await sbx.commands.run('sleep 2 & echo started')
    const took = Date.now() - t0
    assert.equal(r.stdout, 'started\n')
    assert.ok(took >= 1800, `took ${took} ms, want ~2000 (the end waits for every pipe holder)`)
  })
})
