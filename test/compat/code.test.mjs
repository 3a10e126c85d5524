// Stateful code execution through the unmodified @e2b/code-interpreter SDK
// (debug mode) against our envd running Jupyter: what the SDK's own suites
// check that runs in debug mode (docs/wire.md, "Code-interpreter API"),
// plus the languages envd supports (python, javascript and typescript on
// Deno, r, bash). E2B_SANDBOX_URL sends the code API calls to envd's main
// port, which serves them too.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { InvalidArgumentError, NotFoundError, Sandbox, SandboxError, TimeoutError } from '@e2b/code-interpreter'
import { dumpLogOnFailure, rejection, sleep, startEnvd, stopEnvd } from './harness.mjs'

const T = { timeout: 60000 }

describe('code interpreter', () => {
  /** @type {Sandbox} */
  let sbx
  let scratch // a directory the kernels' user (root, or user when strict) can enter

  before(async () => {
    await startEnvd({ jupyter: true })
    sbx = await Sandbox.create({ debug: true })
    scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-code-'))
    fs.chmodSync(scratch, 0o755)
  })
  after(async () => {
    fs.rmSync(scratch, { recursive: true, force: true })
    await stopEnvd()
  })
  afterEach((t) => dumpLogOnFailure(t))

  describe('python', () => {
    it('runCode keeps state and counts executions', T, async () => {
      const ctx = await sbx.createCodeContext()
      const first = await sbx.runCode('x = 1', { context: ctx })
      assert.equal(first.error, undefined)
      const second = await sbx.runCode('x += 1; x', { context: ctx })
      assert.equal(second.text, '2')
      assert.equal(first.executionCount, 1)
      assert.equal(second.executionCount, 2)
    })

    it('basic: x =1; x in the default context', T, async () => {
      const exe = await sbx.runCode('x =1; x')
      assert.equal(exe.text, '1')
    })

    it('onStdout, onStderr, onResult, onError', T, async () => {
      const out = []
      const err = []
      const results = []
      const errors = []
      const exe = await sbx.runCode('import sys\nprint("hello")\nprint("This is an error message", file=sys.stderr)\nx = 1\nx', {
        onStdout: (m) => out.push(m),
        onStderr: (m) => err.push(m),
        onResult: (r) => results.push(r),
        onError: (e) => errors.push(e),
      })
      assert.deepEqual(exe.logs.stdout, ['hello\n'])
      assert.deepEqual(exe.logs.stderr, ['This is an error message\n'])
      assert.equal(out.length, 1)
      assert.equal(out[0].line, 'hello\n')
      assert.equal(err.length, 1)
      assert.equal(results.length, 1)
      assert.equal(results[0].text, '1')
      assert.equal(errors.length, 0)

      const failed = await sbx.runCode('xyz', { onError: (e) => errors.push(e) })
      assert.equal(errors.length, 1)
      assert.equal(errors[0].name, 'NameError')
      assert.equal(failed.error.name, 'NameError')
    })

    it('errors carry name, value and traceback', T, async () => {
      const exe = await sbx.runCode('def f():\n    raise ValueError("boom")\nf()')
      assert.equal(exe.error.name, 'ValueError')
      assert.equal(exe.error.value, 'boom')
      assert.match(exe.error.traceback, /raise ValueError\("boom"\)/)
    })

    it('unicode round trips (the stream is ASCII-escaped)', T, async () => {
      const exe = await sbx.runCode('s = "é 漢字 😀"; print(s); s')
      assert.deepEqual(exe.logs.stdout, ['é 漢字 😀\n'])
      assert.equal(exe.text, 'é 漢字 😀')
    })

    it('png from matplotlib, with text and an empty extra', T, async () => {
      const exe = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()')
      assert.equal(exe.error, undefined)
      const r = exe.results[0]
      assert.ok(r.png && r.png.length > 100, 'png')
      assert.ok(r.text, 'text')
      assert.deepEqual(r.extra, {})
      assert.equal(r.isMainResult, false)
    })

    it('html and a latex-only display', T, async () => {
      const exe = await sbx.runCode(
        'from IPython.display import HTML, Latex, display\ndisplay(HTML("<b>bold</b>"))\ndisplay({"text/latex": "$x$"}, raw=True)',
      )
      assert.equal(exe.results[0].html, '<b>bold</b>')
      assert.deepEqual(exe.results[1].formats(), ['latex'])
    })

    it('a plot then a value give two results', T, async () => {
      const results = []
      await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nx = 3\nx', {
        onResult: (r) => results.push(r),
      })
      assert.equal(results.length, 2)
    })

    it('DataFrame data', T, async () => {
      const exe = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2, 3]})')
      const r = exe.results[0]
      assert.ok(r.data, 'data')
      assert.ok('a' in r.data)
      assert.equal(r.data.a.length, 3)
      assert.ok(r.html)
    })
  })

  describe('charts', () => {
    const chartOf = async (code) => {
      const exe = await sbx.runCode(code)
      assert.equal(exe.error, undefined, exe.error?.traceback)
      const r = exe.results.find((x) => x.chart)
      assert.ok(r, `no chart in ${JSON.stringify(exe.results.map((x) => x.formats()))}`)
      return r.chart
    }

    it('bar', T, async () => {
      const chart = await chartOf(`import matplotlib.pyplot as plt
authors = ['Author A', 'Author B', 'Author C', 'Author D']
sales = [100, 200, 300, 400]
plt.figure(figsize=(10, 6))
plt.bar(authors, sales, label='Books Sold', color='blue')
plt.xlabel('Authors')
plt.ylabel('Number of Books Sold')
plt.title('Book Sales by Authors')
plt.tight_layout()
plt.show()`)
      assert.equal(chart.type, 'bar')
      assert.equal(chart.title, 'Book Sales by Authors')
      assert.equal(chart.x_label, 'Authors')
      assert.equal(chart.y_label, 'Number of Books Sold')
      assert.equal(chart.x_unit, null)
      assert.equal(chart.y_unit, null)
      assert.deepEqual(chart.elements.map((e) => e.value), [100, 200, 300, 400])
      assert.deepEqual(chart.elements.map((e) => e.label), ['Author A', 'Author B', 'Author C', 'Author D'])
      assert.ok(chart.elements.every((e) => e.group === 'Books Sold'))
    })

    it('line with units and a log scale', T, async () => {
      const chart = await chartOf(`import matplotlib.pyplot as plt
import numpy as np
x = np.linspace(0, 100, 100)
y = np.exp(x / 20)
plt.plot(x, y, label='y = e^x')
plt.yscale('log')
plt.xlabel('X-axis')
plt.ylabel('Y-axis (log scale)')
plt.title('Chart with Log Scale on Y-axis')
plt.legend()
plt.show()`)
      assert.equal(chart.type, 'line')
      assert.equal(chart.y_scale, 'log')
      assert.equal(chart.x_scale, 'linear')
      assert.equal(chart.y_unit, 'log scale')
      assert.equal(chart.x_unit, null)
      assert.equal(chart.elements.length, 1)
      assert.equal(chart.elements[0].label, 'y = e^x')
      assert.equal(chart.elements[0].points.length, 100)
    })

    it('pie, scatter, box and whisker, superchart', T, async () => {
      const pie = await chartOf(`import matplotlib.pyplot as plt
plt.pie([90, 10], labels=['No', 'No, in blue'])
plt.title('Will I wake up early tomorrow?')
plt.show()`)
      assert.equal(pie.type, 'pie')
      assert.deepEqual(pie.elements.map((e) => e.angle), [324, 36])

      const scatter = await chartOf(`import matplotlib.pyplot as plt
plt.scatter([1, 2, 3, 4, 5], [2, 3, 5, 7, 11], label='Dataset 1')
plt.xlabel('A'); plt.ylabel('B')
plt.show()`)
      assert.equal(scatter.type, 'scatter')
      assert.equal(scatter.title, null)
      assert.equal(scatter.elements[0].points.length, 5)

      const box = await chartOf(`import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.boxplot([[78, 85, 88, 90, 92], [84, 84.75, 88, 90.5, 95, 76]], labels=['Class A', 'Class B'], patch_artist=True)
ax.set_title('Exam Scores Distribution')
plt.show()`)
      assert.equal(box.type, 'box_and_whisker')
      assert.deepEqual(box.elements.map((e) => e.label), ['Class A', 'Class B'])

      const superchart = await chartOf(`import matplotlib.pyplot as plt
fig, (a, b) = plt.subplots(2, 1)
a.plot([1, 2, 3], [1, 4, 9]); a.set_title('Sine Wave')
b.scatter([1, 2], [3, 4]); b.set_title('Scatter Plot')
fig.suptitle('Multiple Charts Example')
plt.show()`)
      assert.equal(superchart.type, 'superchart')
      assert.equal(superchart.title, 'Multiple Charts Example')
      assert.deepEqual(superchart.elements.map((e) => e.type), ['line', 'scatter'])
    })
  })

  describe('contexts', () => {
    it('create, list, restart, remove', T, async () => {
      const ctx = await sbx.createCodeContext()
      let list = await sbx.listCodeContexts()
      assert.deepEqual(list[list.length - 1], ctx)
      assert.equal(ctx.language, 'python')
      assert.equal(ctx.cwd, '/home/user')
      assert.ok(list.some((c) => c.language === 'python'))

      const withOpts = await sbx.createCodeContext({ language: 'python', cwd: scratch })
      list = await sbx.listCodeContexts()
      assert.deepEqual(list[list.length - 1], withOpts)

      await sbx.runCode('x = 1', { context: ctx })
      await sbx.restartCodeContext(ctx)
      const after = await sbx.runCode('x', { context: ctx })
      assert.equal(after.error.name, 'NameError')
      assert.equal(after.error.value, "name 'x' is not defined")

      await sbx.removeCodeContext(ctx)
      await sbx.removeCodeContext(withOpts.id)
      list = await sbx.listCodeContexts()
      assert.ok(!list.some((c) => c.id === ctx.id || c.id === withOpts.id))
      const err = await rejection(sbx.runCode('1', { context: ctx }), 'a run in a removed context')
      assert.ok(err instanceof NotFoundError, `got ${err}`)
      assert.match(err.message, new RegExp(`Context ${ctx.id} not found`))
    })

    it('independence of kernels', T, async () => {
      await sbx.runCode('independent = 1')
      const ctx = await sbx.createCodeContext()
      const exe = await sbx.runCode('independent', { context: ctx })
      assert.equal(exe.error.value, "name 'independent' is not defined")
      await sbx.removeCodeContext(ctx)
    })

    it('context and language together are refused; so is a non-string code', T, async () => {
      const ctx = await sbx.createCodeContext()
      const err = await rejection(sbx.runCode('1', { context: ctx, language: 'python' }))
      assert.ok(err instanceof InvalidArgumentError, `got ${err}`)
      // The upstream JS test passes an object as the code and expects a rejection (422).
      const bad = await rejection(sbx.runCode({ context: ctx, language: 'python' }))
      assert.ok(bad instanceof SandboxError, `got ${bad}`)
      await sbx.removeCodeContext(ctx)
    })

    it('an unknown language is refused with a clear error', T, async () => {
      const err = await rejection(sbx.runCode('1', { language: 'cobol' }))
      assert.ok(err instanceof SandboxError, `got ${err}`)
      // The SDK shows only `${status} ${statusText}`: envd's reason is there.
      assert.match(err.message, /^400 unsupported language "cobol".*available languages: .*python/)
    })
  })

  describe('languages and cwd', () => {
    const cases = [
      ['python', 'from pathlib import Path\nprint(Path.cwd())'],
      ['js', 'console.log(process.cwd())'],
      ['ts', 'const d: string = Deno.cwd()\nconsole.log(d)'],
      ['r', 'cat(getwd(), "\\n")'],
      ['bash', 'pwd'],
    ]
    for (const [language, code] of cases) {
      it(`cwd ${language}`, T, async () => {
        const ctx = await sbx.createCodeContext({ language, cwd: scratch })
        const exe = await sbx.runCode(code, { context: ctx })
        assert.equal(exe.error, undefined, exe.error?.value)
        assert.equal(exe.logs.stdout.join('').trim(), scratch)
        await sbx.removeCodeContext(ctx)
      })
    }

    it('default cwd is /home/user (python via !pwd, js result text)', T, async () => {
      const py = await sbx.runCode('!pwd')
      assert.equal(py.logs.stdout.join('').trim(), '/home/user')
      const js = await sbx.runCode('process.cwd()', { language: 'js' })
      assert.equal(js.text, '/home/user')
    })

    it('javascript: console.log, ESM import, top-level await', T, async () => {
      const hello = await sbx.runCode('console.log("Hello World!")', { language: 'js' })
      assert.deepEqual(hello.logs.stdout, ['Hello World!\n'])
      const esm = await sbx.runCode("import { readFileSync } from 'node:fs'\nconsole.log(typeof readFileSync)", { language: 'javascript' })
      assert.deepEqual(esm.logs.stdout, ['function\n'])
      const tla = await sbx.runCode("await Promise.resolve('Hello World!')", { language: 'js' })
      assert.equal(tla.text, 'Hello World!')
      const state1 = await sbx.runCode('var kept = 41', { language: 'js' })
      assert.equal(state1.error, undefined)
      const state2 = await sbx.runCode('kept + 1', { language: 'js' })
      assert.equal(state2.text, '42')
      const list = await sbx.listCodeContexts()
      assert.ok(list.some((c) => c.language === 'javascript'))
    })

    it('typescript', T, async () => {
      const exe = await sbx.runCode("const message: string = 'Hello, World!'\nconsole.log(message)", { language: 'ts' })
      assert.deepEqual(exe.logs.stdout, ['Hello, World!\n'])
    })

    it('r', T, async () => {
      const exe = await sbx.runCode('print("Hello, World!")', { language: 'r' })
      assert.deepEqual(exe.logs.stdout, ['[1] "Hello, World!"\n'])
    })

    it('bash', T, async () => {
      const exe = await sbx.runCode('X=hello; echo $X; false; echo "status $?"', { language: 'bash' })
      assert.deepEqual(exe.logs.stdout.join(''), 'hello\nstatus 1\n')
      const next = await sbx.runCode('echo $X', { language: 'bash' })
      assert.equal(next.logs.stdout.join(''), 'hello\n')
    })
  })

  describe('env vars per execution', () => {
    const cases = [
      ['python', "import os; print(os.getenv('FOO', 'default'))"],
      ['javascript', "console.log(process.env.FOO || 'default')"],
      ['typescript', "console.log(Deno.env.get('FOO') ?? 'default')"],
      ['r', 'cat(Sys.getenv("FOO", unset = "default"), "\\n")'],
      ['bash', 'echo ${FOO:-default}'],
    ]
    for (const [language, code] of cases) {
      it(language, T, async () => {
        const value = `it's "bar" é`
        const set = await sbx.runCode(code, { language, envs: { FOO: value } })
        assert.equal(set.error, undefined, set.error?.value)
        assert.equal(set.logs.stdout.join('').trim(), value)
        const unset = await sbx.runCode(code, { language })
        assert.equal(unset.logs.stdout.join('').trim(), 'default')
      })
    }

    it('sandbox-wide vars are visible (E2B_SANDBOX)', T, async () => {
      const exe = await sbx.runCode("import os; os.environ['E2B_SANDBOX']")
      assert.equal(exe.text, 'true')
    })
  })

  describe('timeouts', () => {
    it('timeoutMs gives TimeoutError, and the next run works and keeps state', T, async () => {
      await sbx.runCode('survivor = 5')
      const err = await rejection(sbx.runCode('import time\ntime.sleep(300)', { timeoutMs: 3000 }), 'a timed-out run')
      assert.ok(err instanceof TimeoutError, `got ${err}`)
      const start = Date.now()
      const exe = await sbx.runCode('survivor + 1', { timeoutMs: 10000 })
      assert.equal(exe.text, '6')
      assert.ok(Date.now() - start < 10000)
    })

    it('a JavaScript run that ignores the interrupt is stopped too', T, async () => {
      const err = await rejection(sbx.runCode('while (true) {}', { language: 'js', timeoutMs: 2000 }), 'a timed-out run')
      assert.ok(err instanceof TimeoutError, `got ${err}`)
      await sleep(100)
      const exe = await sbx.runCode('1 + 1', { language: 'js', timeoutMs: 15000 })
      assert.equal(exe.text, '2')
    })

    it('a kernel that dies is reported and replaced', T, async () => {
      const ctx = await sbx.createCodeContext()
      const died = await sbx.runCode('import os\nos._exit(1)', { context: ctx })
      assert.equal(died.error.name, 'ContextRestarting')
      const exe = await sbx.runCode('1 + 1', { context: ctx })
      assert.equal(exe.text, '2')
      await sbx.removeCodeContext(ctx)
    })
  })
})
