// The README's quick-start snippets run as written: each code block after
// an `<!-- example: NAME -->` line is run with node, as a user who saved it
// as a .mjs file would (its imports resolve from this directory), against
// envd with Jupyter, and must print what the README says it prints.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { fileURLToPath } from 'node:url'
import { dumpLogOnFailure, startEnvd, stopEnvd } from './harness.mjs'

const here = path.dirname(fileURLToPath(import.meta.url))
const readme = fs.readFileSync(path.join(here, '..', '..', 'README.md'), 'utf8')
const T = { timeout: 180000 }

// examples returns { name: code } for every marked block.
function examples() {
  const out = {}
  const re = /<!-- example: ([\w-]+) -->\s*```js\n([\s\S]*?)```/g
  for (const m of readme.matchAll(re)) out[m[1]] = m[2]
  return out
}

// What each example prints, line by line (a regexp each).
const wants = {
  e2b: [/^hello$/, /^(user|root)$/, /^hi from the SDK$/],
  'code-interpreter': [/^42$/, /^a DataFrame, as HTML$/, /^a chart, as a PNG$/, /^\[ 2, 4, 6 \]$/],
}

describe('README examples', () => {
  before(async () => {
    await startEnvd({ jupyter: true })
  })
  after(async () => {
    await stopEnvd()
  })
  afterEach(dumpLogOnFailure)

  it('has the examples this test knows', () => {
    assert.deepEqual(Object.keys(examples()).sort(), Object.keys(wants).sort())
  })

  for (const [name, want] of Object.entries(wants)) {
    it(`runs ${name} as written`, T, async () => {
      const code = examples()[name]
      assert.ok(code, `README has no example ${name}`)
      const file = path.join(here, `.readme-${name}-${process.pid}.mjs`)
      fs.writeFileSync(file, code)
      try {
        // The harness pointed the SDKs at this envd (E2B_SANDBOX_URL).
        const { stdout } = await promisify(execFile)(process.execPath, [file], { env: process.env, timeout: 150000 })
        const lines = stdout.split('\n').filter((l) => l !== '') // a command's stdout ends in its own newline
        assert.equal(lines.length, want.length, `output:\n${stdout}`)
        want.forEach((re, i) => assert.match(lines[i], re, `line ${i + 1} of:\n${stdout}`))
      } finally {
        fs.rmSync(file, { force: true })
      }
    })
  }
})
