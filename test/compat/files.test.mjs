// Files through the unmodified e2b SDK (debug mode) against our envd.
// Checks 20-34 of docs/wire.md ("Compatibility checks"), plus the rest of
// the SDK's files API: write (text, bytes, blob, stream, many files), read in
// every format, list with depth, exists, getInfo, makeDir, rename, remove,
// watchDir with and without recursion, metadata, and downloadUrl/uploadUrl
// fetched with plain curl. The default user is `user` (home /home/user).
// Where upstream acts as root for the user (reads of any file, a new file
// in a directory only root may write), strict mode (harness STRICT) refuses,
// as a shell as that user would: both are asserted.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import {
  AuthenticationError,
  FileNotFoundError,
  FileType,
  FilesystemEventType,
  InvalidArgumentError,
  Sandbox,
  SandboxError,
  TimeoutError,
} from 'e2b'
import { STRICT, dumpLogOnFailure, rejection, sleep, startEnvd, stopEnvd, waitFor } from './harness.mjs'

const T = { timeout: 30000 }
const HOME = '/home/user'

describe('files', () => {
  /** @type {Sandbox} */
  let sbx
  let base // a fresh directory of user's, removed at the end
  let local // a scratch directory on the test's side

  before(async () => {
    try {
      execFileSync('id', ['-u', 'user'])
    } catch {
      assert.fail("account 'user' is missing: run scripts/install-deps.sh")
    }
    await startEnvd()
    sbx = await Sandbox.create({ debug: true })
    base = `${HOME}/envd-compat-files-${process.pid}`
    await sbx.files.remove(base)
    assert.equal(await sbx.files.makeDir(base), true)
    local = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-compat-files-'))
  })
  after(async () => {
    if (sbx && base) await sbx.files.remove(base).catch(() => {})
    if (local) fs.rmSync(local, { recursive: true, force: true })
    await stopEnvd()
  })
  afterEach((t) => dumpLogOnFailure(t))

  describe('write', () => {
    it('text, with the entry of the written file (check 20)', T, async () => {
      const info = await sbx.files.write(`${base}/a.txt`, 'hello')
      assert.deepEqual({ ...info }, { name: 'a.txt', path: `${base}/a.txt`, type: FileType.FILE, metadata: undefined })
      assert.equal(await sbx.files.read(`${base}/a.txt`), 'hello')
    })

    it('a relative path is in the home (check 20)', T, async () => {
      const rel = `envd-compat-rel-${process.pid}.txt`
      const info = await sbx.files.write(rel, 'x')
      assert.equal(info.path, `${HOME}/${rel}`)
      await sbx.files.remove(rel)
    })

    it('bytes, blob and stream, and back (check 22)', T, async () => {
      const bytes = new Uint8Array([0, 1, 2, 250, 255, 10])
      await sbx.files.write(`${base}/bytes.bin`, bytes.buffer)
      assert.deepEqual(await sbx.files.read(`${base}/bytes.bin`, { format: 'bytes' }), bytes)

      await sbx.files.write(`${base}/blob.txt`, new Blob(['from a blob']))
      assert.equal(await sbx.files.read(`${base}/blob.txt`), 'from a blob')

      const big = 'stream chunk '.repeat(100000)
      const stream = new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode(big))
          c.enqueue(new TextEncoder().encode('end'))
          c.close()
        },
      })
      await sbx.files.write(`${base}/stream.txt`, stream)
      assert.equal(await sbx.files.read(`${base}/stream.txt`), big + 'end')
    })

    it('octet-stream and gzip bodies (check 22)', T, async () => {
      await sbx.files.write(`${base}/octet.txt`, 'octet', { useOctetStream: true })
      assert.equal(await sbx.files.read(`${base}/octet.txt`), 'octet')
      await sbx.files.write(`${base}/gz.txt`, 'gz '.repeat(1000), { gzip: true })
      assert.equal(await sbx.files.read(`${base}/gz.txt`), 'gz '.repeat(1000))
    })

    it('many files at once, parents created (check 21)', T, async () => {
      const infos = await sbx.files.write([
        { path: `${base}/m1.txt`, data: 'one' },
        { path: `${base}/many/sub/m2.txt`, data: new Blob(['two']) },
        { path: `${base}/many/m3 with space ü.txt`, data: new Uint8Array([51]).buffer },
      ])
      assert.deepEqual(
        infos.map((i) => [i.name, i.path, i.type]),
        [
          ['m1.txt', `${base}/m1.txt`, 'file'],
          ['m2.txt', `${base}/many/sub/m2.txt`, 'file'],
          ['m3 with space ü.txt', `${base}/many/m3 with space ü.txt`, 'file'],
        ],
      )
      assert.equal(await sbx.files.read(`${base}/many/sub/m2.txt`), 'two')
      assert.equal(await sbx.files.read(`${base}/many/m3 with space ü.txt`), '3')
      const sub = await sbx.files.getInfo(`${base}/many/sub`)
      assert.equal(sub.owner, 'user')
      assert.equal(sub.mode, 0o755)
      assert.deepEqual(await sbx.files.write([]), [])
    })

    it('metadata is stored and read back (check 23)', T, async () => {
      const info = await sbx.files.write(`${base}/meta.txt`, 'm', { metadata: { Foo: 'bar', other: 'v' } })
      assert.deepEqual(info.metadata, { foo: 'bar', other: 'v' })
      const got = await sbx.files.getInfo(`${base}/meta.txt`)
      assert.deepEqual(got.metadata, { foo: 'bar', other: 'v' })
      const listed = (await sbx.files.list(base)).find((e) => e.name === 'meta.txt')
      assert.deepEqual(listed.metadata, { foo: 'bar', other: 'v' })
    })

    it('as another user, with their ownership', T, async () => {
      await sbx.files.write(`${base}/by-root.txt`, 'r', { user: 'root' })
      assert.equal((await sbx.files.getInfo(`${base}/by-root.txt`)).owner, 'root')
      // A new file in root's home: upstream creates it as root and gives
      // it to the user; strict mode refuses it, as a shell as user would.
      const inRoot = `/root/envd-compat-files-${process.pid}.txt`
      try {
        if (STRICT) {
          const err = await rejection(sbx.files.write(inRoot, 'x'))
          assert.ok(err instanceof SandboxError, String(err))
          assert.match(err.message, /403.*permission denied: user 'user'/)
          assert.equal(fs.existsSync(inRoot), false)
        } else {
          await sbx.files.write(inRoot, 'x')
          assert.equal(fs.readFileSync(inRoot, 'utf8'), 'x')
          assert.equal(fs.statSync(inRoot).uid, Number(execFileSync('id', ['-u', 'user'], { encoding: 'utf8' })))
          assert.equal(fs.statSync('/root').uid, 0, "root's home changed hands")
        }
      } finally {
        fs.rmSync(inRoot, { force: true })
      }
    })
  })

  describe('read', () => {
    before(async () => {
      await sbx.files.write(`${base}/r.txt`, 'hello')
      await sbx.files.write(`${base}/empty.txt`, '')
    })

    it('in every format (check 24)', T, async () => {
      const p = `${base}/r.txt`
      assert.equal(await sbx.files.read(p), 'hello')
      assert.equal(await sbx.files.read(p, { format: 'text' }), 'hello')
      assert.deepEqual(await sbx.files.read(p, { format: 'bytes' }), new Uint8Array([104, 101, 108, 108, 111]))
      const blob = await sbx.files.read(p, { format: 'blob' })
      assert.equal(await blob.text(), 'hello')
      const stream = await sbx.files.read(p, { format: 'stream' })
      assert.equal(await new Response(stream).text(), 'hello')
      assert.equal(await sbx.files.read(p, { gzip: true }), 'hello')
    })

    it('an empty file in every format (check 24)', T, async () => {
      const p = `${base}/empty.txt`
      assert.equal(await sbx.files.read(p), '')
      assert.equal((await sbx.files.read(p, { format: 'bytes' })).length, 0)
      assert.equal((await sbx.files.read(p, { format: 'blob' })).size, 0)
      assert.equal(await new Response(await sbx.files.read(p, { format: 'stream' })).text(), '')
    })

    it('errors (check 25)', T, async () => {
      let err = await rejection(sbx.files.read(`${base}/missing`))
      assert.ok(err instanceof FileNotFoundError, String(err))
      assert.match(err.message, /does not exist/)
      err = await rejection(sbx.files.read(base))
      assert.ok(err instanceof InvalidArgumentError, String(err))
      assert.match(err.message, /is a directory/)
      err = await rejection(sbx.files.read(`${base}/r.txt`, { user: 'nosuchuser' }))
      assert.ok(err instanceof AuthenticationError, String(err))
      // A file the user may not read.
      const secret = path.join(local, 'secret')
      fs.writeFileSync(secret, 's', { mode: 0o600 })
      fs.chmodSync(local, 0o755)
      // Upstream reads as root; strict mode refuses, as a shell as user would.
      if (STRICT) {
        err = await rejection(sbx.files.read(secret))
        assert.match(err.message, /403.*permission denied/)
      } else {
        assert.equal(await sbx.files.read(secret), 's')
      }
      assert.equal(await sbx.files.read(secret, { user: 'root' }), 's')
    })
  })

  describe('info, list, exists', () => {
    before(async () => {
      await sbx.files.write(`${base}/l/b.txt`, 'b')
      await sbx.files.write(`${base}/l/a.txt`, 'aa')
      await sbx.files.write(`${base}/l/sub/c.txt`, 'c')
      fs.symlinkSync(`${base}/l/a.txt`, `${base}/l/link.txt`)
      fs.symlinkSync(`${base}/l/nothere`, `${base}/l/dangling`)
    })

    it('exists (check 26)', T, async () => {
      assert.equal(await sbx.files.exists(`${base}/l/a.txt`), true)
      assert.equal(await sbx.files.exists(`${base}/l/nope`), false)
    })

    it('getInfo of a file, a dir, a symlink (check 26)', T, async () => {
      const f = await sbx.files.getInfo(`${base}/l/a.txt`)
      assert.equal(f.name, 'a.txt')
      assert.equal(f.type, FileType.FILE)
      assert.equal(f.path, `${base}/l/a.txt`)
      assert.equal(f.size, 2)
      assert.equal(f.mode, 0o644)
      assert.equal(f.permissions, '-rw-r--r--')
      assert.equal(f.owner, 'user')
      assert.equal(f.group, 'user')
      assert.ok(f.modifiedTime instanceof Date)
      assert.ok(Math.abs(f.modifiedTime.getTime() - Date.now()) < 60000)
      assert.equal(f.symlinkTarget, undefined)

      const d = await sbx.files.getInfo(`${base}/l/sub`)
      assert.equal(d.type, FileType.DIR)
      assert.equal(d.mode, 0o755)
      assert.equal(d.permissions, 'drwxr-xr-x')

      const l = await sbx.files.getInfo(`${base}/l/link.txt`)
      assert.equal(l.type, FileType.FILE)
      assert.equal(l.permissions, 'Lrwxrwxrwx')
      assert.equal(l.symlinkTarget, `${base}/l/a.txt`)

      const err = await rejection(sbx.files.getInfo(`${base}/l/nope`))
      assert.ok(err instanceof FileNotFoundError, String(err))
    })

    it('list with depth, in order; dangling links are dropped (check 27)', T, async () => {
      const one = await sbx.files.list(`${base}/l`)
      assert.deepEqual(
        one.map((e) => e.path),
        ['a.txt', 'b.txt', 'link.txt', 'sub'].map((n) => `${base}/l/${n}`),
      )
      const two = await sbx.files.list(`${base}/l`, { depth: 2 })
      assert.deepEqual(
        two.map((e) => e.name),
        ['a.txt', 'b.txt', 'link.txt', 'sub', 'c.txt'],
      )
      assert.equal(two[4].path, `${base}/l/sub/c.txt`)
    })

    it('list errors (check 27)', T, async () => {
      let err = await rejection(sbx.files.list(`${base}/nope`))
      assert.ok(err instanceof FileNotFoundError, String(err))
      err = await rejection(sbx.files.list(`${base}/l/a.txt`))
      assert.ok(err instanceof InvalidArgumentError, String(err))
      await rejection(sbx.files.list(`${base}/l`, { depth: -1 }))
    })
  })

  describe('makeDir, rename, remove', () => {
    it('makeDir (check 28)', T, async () => {
      assert.equal(await sbx.files.makeDir(`${base}/d1/d2`), true)
      assert.equal(await sbx.files.makeDir(`${base}/d1/d2`), false)
      await sbx.files.write(`${base}/d1/f`, 'x')
      const err = await rejection(sbx.files.makeDir(`${base}/d1/f`))
      assert.ok(err instanceof InvalidArgumentError, String(err))
    })

    it('rename (check 29)', T, async () => {
      await sbx.files.write(`${base}/mv.txt`, 'move me')
      const info = await sbx.files.rename(`${base}/mv.txt`, `${base}/newdir/mv-renamed.txt`)
      assert.equal(info.name, 'mv-renamed.txt')
      assert.equal(info.path, `${base}/newdir/mv-renamed.txt`)
      assert.equal(info.type, FileType.FILE)
      assert.equal(await sbx.files.read(`${base}/newdir/mv-renamed.txt`), 'move me')
      const err = await rejection(sbx.files.rename(`${base}/zzz`, `${base}/yyy`))
      assert.ok(err instanceof FileNotFoundError, String(err))
    })

    it('remove (check 30)', T, async () => {
      await sbx.files.write(`${base}/rm/deep/f`, 'x')
      await sbx.files.remove(`${base}/rm`)
      assert.equal(await sbx.files.exists(`${base}/rm`), false)
      await sbx.files.remove(`${base}/never-was`)
    })
  })

  describe('watchDir', () => {
    it('recursive, with entries (check 31)', T, async () => {
      const dir = `${base}/wd`
      await sbx.files.makeDir(dir)
      const events = []
      let exited = null
      const handle = await sbx.files.watchDir(dir, (e) => events.push(e), {
        recursive: true,
        includeEntry: true,
        onExit: (err) => {
          exited = err ?? 'clean'
        },
      })
      await sbx.files.write(`${dir}/f.txt`, 'x')
      await sbx.files.makeDir(`${dir}/sub`)
      await sbx.files.write(`${dir}/sub/g.txt`, 'y')
      await sbx.files.rename(`${dir}/f.txt`, `${dir}/f2.txt`)
      await sbx.files.remove(`${dir}/f2.txt`)
      const want = [
        'create f.txt', 'write f.txt', 'create sub', 'create sub/g.txt', 'write sub/g.txt',
        'rename f.txt', 'create f2.txt', 'remove f2.txt',
      ]
      const seen = () => events.map((e) => `${e.type} ${e.name}`)
      await waitFor(() => want.every((w) => seen().includes(w)), { what: `events ${want} (got ${seen()})` })
      const writeG = events.find((e) => e.type === FilesystemEventType.WRITE && e.name === 'sub/g.txt')
      assert.equal(writeG.entry.path, `${dir}/sub/g.txt`)
      assert.equal(writeG.entry.size, 1)
      assert.equal(events.find((e) => e.type === FilesystemEventType.REMOVE).entry, undefined)
      assert.ok(seen().indexOf('rename f.txt') < seen().indexOf('create f2.txt'))
      assert.ok(!seen().some((s) => s.includes('.envd-upload-')), `temporary files show: ${seen()}`)
      await handle.stop()
      // stop() aborts the request on the client's side: the SDK reports the
      // abort itself ([canceled]); envd has nothing to add.
      await waitFor(() => exited !== null, { what: 'onExit' })
      assert.ok(exited === 'clean' || /\[canceled\]/.test(exited.message), String(exited))
    })

    it('not recursive: only direct children', T, async () => {
      const dir = `${base}/wd-flat`
      await sbx.files.makeDir(`${dir}/sub`)
      const events = []
      const handle = await sbx.files.watchDir(dir, (e) => events.push(`${e.type} ${e.name}`))
      await sbx.files.write(`${dir}/sub/deep.txt`, 'x')
      await sbx.files.write(`${dir}/top.txt`, 'x')
      await waitFor(() => events.includes('write top.txt'), { what: `write top.txt (got ${events})` })
      await sleep(200)
      assert.ok(!events.some((e) => e.includes('sub/')), `events from below: ${events}`)
      await handle.stop()
    })

    it('errors and the timeout (checks 32, 33)', T, async () => {
      let err = await rejection(sbx.files.watchDir(`${base}/nowatch`, () => {}))
      assert.ok(err instanceof FileNotFoundError, String(err))
      await sbx.files.write(`${base}/not-a-dir`, 'x')
      err = await rejection(sbx.files.watchDir(`${base}/not-a-dir`, () => {}))
      assert.ok(err instanceof InvalidArgumentError, String(err))

      let exitErr = null
      const t0 = Date.now()
      await sbx.files.watchDir(base, () => {}, { timeoutMs: 1500, onExit: (e) => (exitErr = e ?? 'clean') })
      await waitFor(() => exitErr !== null, { what: 'onExit after the timeout' })
      assert.ok(exitErr instanceof TimeoutError, String(exitErr))
      assert.ok(Date.now() - t0 >= 1400)
    })
  })

  describe('URLs fetched with curl (check 34)', () => {
    it('downloadUrl', T, async () => {
      await sbx.files.write(`${base}/dl me.txt`, 'downloaded')
      const url = await sbx.downloadUrl(`${base}/dl me.txt`)
      assert.equal(url, `${process.env.E2B_SANDBOX_URL}/files?${new URLSearchParams({ path: `${base}/dl me.txt` })}`)
      assert.equal(execFileSync('curl', ['-fsS', url], { encoding: 'utf8' }), 'downloaded')
    })

    it('uploadUrl', T, async () => {
      const src = path.join(local, 'up.txt')
      fs.writeFileSync(src, 'uploaded with curl')
      const url = await sbx.uploadUrl(`${base}/up.txt`)
      const out = execFileSync('curl', ['-fsS', '-F', `file=@${src}`, url], { encoding: 'utf8' })
      assert.equal(JSON.parse(out)[0].path, `${base}/up.txt`)
      assert.equal(await sbx.files.read(`${base}/up.txt`), 'uploaded with curl')
      const asRoot = await sbx.uploadUrl(`${base}/up-root.txt`, { user: 'root' })
      execFileSync('curl', ['-fsS', '-F', `file=@${src}`, asRoot])
      assert.equal((await sbx.files.getInfo(`${base}/up-root.txt`)).owner, 'root')
    })
  })
})
