// Java through the unmodified @e2b/code-interpreter SDK (debug mode) against
// our envd running Jupyter: envd's own Java kernel (JShell behind an
// ipykernel wrapper; upstream's template ships IJava). State between runs,
// System.out and System.err, the final expression's value, an exception,
// env vars per execution as system properties (upstream's own test reads
// System.getProperty("FOO") and System.getProperty("FOO", "default")), a
// context with a cwd, and a timed-out run that keeps the state.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox, TimeoutError } from '@e2b/code-interpreter'
import { dumpLogOnFailure, rejection, startEnvd, stopEnvd } from './harness.mjs'

// The first Java run waits for two JVMs to start.
const T = { timeout: 120000 }

describe('java', () => {
  /** @type {Sandbox} */
  let sbx
  let scratch // a directory the kernels' user (root, or user when strict) can enter

  before(async () => {
    await startEnvd({ jupyter: true })
    sbx = await Sandbox.create({ debug: true })
    scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-java-'))
    fs.chmodSync(scratch, 0o755)
  })
  after(async () => {
    fs.rmSync(scratch, { recursive: true, force: true })
    await stopEnvd()
  })
  afterEach((t) => dumpLogOnFailure(t))

  it('keeps state between runs: variables, methods, classes, imports', T, async () => {
    const first = await sbx.runCode(
      'int x = 41;\nString greet(String n) { return "hi " + n; }\nrecord Point(int a, int b) {}\nimport java.time.*;',
      { language: 'java', timeoutMs: 110000 },
    )
    assert.equal(first.error, undefined, first.error?.value)
    assert.deepEqual(first.results, [])
    const second = await sbx.runCode('x + 1', { language: 'java' })
    assert.equal(second.text, '42')
    const third = await sbx.runCode('greet("bob") + " " + new Point(1, 2) + " " + Duration.ofMinutes(2).toSeconds()', { language: 'java' })
    assert.equal(third.text, 'hi bob Point[a=1, b=2] 120')
  })

  it('System.out and System.err', T, async () => {
    const exe = await sbx.runCode('System.out.println("Hello, World!");\nSystem.err.println("This is an error message");', {
      language: 'java',
      timeoutMs: 110000,
    })
    assert.equal(exe.error, undefined, exe.error?.value)
    assert.deepEqual(exe.logs.stdout, ['Hello, World!\n'])
    assert.deepEqual(exe.logs.stderr, ['This is an error message\n'])
    assert.deepEqual(exe.results, [])
  })

  it('an exception carries its name, message and trace', T, async () => {
    const exe = await sbx.runCode(
      'void check(int n) { if (n < 0) throw new IllegalArgumentException("negative: " + n); }\nSystem.out.println("before");\ncheck(-1);',
      { language: 'java', timeoutMs: 110000 },
    )
    assert.equal(exe.error.name, 'java.lang.IllegalArgumentException')
    assert.equal(exe.error.value, 'negative: -1')
    assert.match(exe.error.traceback, /^java\.lang\.IllegalArgumentException: negative: -1\n\tat check\(#\d+:1\)/)
    assert.deepEqual(exe.logs.stdout, ['before\n'])

    const compile = await sbx.runCode('int y = nope + 1;', { language: 'java' })
    assert.equal(compile.error.name, 'CompilationException')
    assert.match(compile.error.value, /cannot find symbol/)
  })

  it('env vars per execution are system properties, restored after the run', T, async () => {
    const value = `it's "bar" é`
    const set = await sbx.runCode('System.getProperty("FOO")', { language: 'java', envs: { FOO: value }, timeoutMs: 110000 })
    assert.equal(set.error, undefined, set.error?.value)
    assert.equal(set.results[0]?.text.trim(), value)
    const unset = await sbx.runCode('System.getProperty("FOO", "default")', { language: 'java' })
    assert.equal(unset.results[0]?.text.trim(), 'default')
  })

  it('a context with a cwd', T, async () => {
    const ctx = await sbx.createCodeContext({ language: 'java', cwd: scratch })
    assert.equal(ctx.language, 'java')
    assert.equal(ctx.cwd, scratch)
    const exe = await sbx.runCode('System.getProperty("user.dir") + "|" + Path.of("").toAbsolutePath()', {
      context: ctx,
      timeoutMs: 110000,
    })
    assert.equal(exe.error, undefined, exe.error?.value)
    assert.equal(exe.text, `${scratch}|${scratch}`)
    // Relative paths resolve there, for java.nio and java.io alike.
    fs.writeFileSync(path.join(scratch, 'for-java.txt'), 'hi', { mode: 0o644 })
    const file = await sbx.runCode('Files.readString(Path.of("for-java.txt")) + " " + new File("for-java.txt").exists()', {
      context: ctx,
    })
    assert.equal(file.error, undefined, file.error?.value)
    assert.equal(file.text, 'hi true')
    await sbx.removeCodeContext(ctx)
  })

  it('a timed-out run is stopped and the state survives', T, async () => {
    const ctx = await sbx.createCodeContext({ language: 'java' })
    const set = await sbx.runCode('int survivor = 5;', { context: ctx, timeoutMs: 110000 })
    assert.equal(set.error, undefined, set.error?.value)
    const err = await rejection(sbx.runCode('long n = 0; while (true) { n++; }', { context: ctx, timeoutMs: 3000 }), 'a timed-out run')
    assert.ok(err instanceof TimeoutError, `got ${err}`)
    const exe = await sbx.runCode('survivor + 1', { context: ctx, timeoutMs: 30000 })
    assert.equal(exe.text, '6')
    await sbx.removeCodeContext(ctx)
  })
})
