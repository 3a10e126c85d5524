// A sandbox whose envd holds an access token, reached by the unmodified SDK
// without it: every kind of route (a Connect stream, a unary Connect call,
// the HTTP file API) is refused as AuthenticationError, and the error
// carries envd's reason, not a bare HTTP status.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { AuthenticationError, Sandbox } from 'e2b'
import { dumpLogOnFailure, rejection, startEnvd, stopEnvd } from './harness.mjs'

const T = { timeout: 30000 }
const REASON = /requires an access token/

describe('a token the SDK does not have', () => {
  /** @type {Sandbox} */
  let sbx

  before(async () => {
    await startEnvd({ args: ['-access-token', 'compat-secret'] })
    sbx = await Sandbox.create({ debug: true })
  })
  after(() => stopEnvd())
  afterEach((t) => dumpLogOnFailure(t))

  const refused = (e) => {
    assert.ok(e instanceof AuthenticationError, `got ${e?.name}: ${e?.message}`)
    assert.match(e.message, REASON)
  }

  it('commands.run (a Connect stream)', T, async () => {
    refused(await rejection(sbx.commands.run('true')))
  })

  it('commands.list (a unary Connect call)', T, async () => {
    refused(await rejection(sbx.commands.list()))
  })

  it('files.list (a unary Connect call)', T, async () => {
    refused(await rejection(sbx.files.list('/')))
  })

  it('files.write (the HTTP file API)', T, async () => {
    refused(await rejection(sbx.files.write('/tmp/envd-token-test', 'x')))
  })
})
