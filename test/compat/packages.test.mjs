// Installing packages from code, through the unmodified
// SDKs, in both modes (in strict mode the kernels run as `user`).
//
// 1. The sandbox's own environment, as scripts/install-deps.sh made it:
//    `python`, `pip` for the default user are the virtual environment
//    /opt/envd-python that the python3 kernel runs, with Debian's pandas
//    still visible, and every command (root's too) gets VIRTUAL_ENV; R's
//    first library and Deno's cache are writable by the kernels' user.
//    Nothing is installed there.
// 2. Installs, with no package registry: envd is pointed at a temporary
//    virtual environment and R library (ENVD_PYTHON_VENV, ENVD_R_LIBRARY, as
//    documented), so nothing lands outside temp dirs. Wheels the test builds
//    are installed with `pip install --no-index --find-links` from a kernel
//    (`!pip`, subprocess) and from a command; a local R source package with
//    install.packages from the R kernel; a local npm tarball with `npm
//    install` from the Deno kernel, then imported as `npm:NAME` (Deno
//    resolves npm: specifiers from the node_modules of a directory with a
//    package.json, offline). Each is usable at once in the same context, in
//    a new context and from commands; `pip list` in a command shows them.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox } from '@e2b/code-interpreter'
import { KERNEL_USER, STRICT, dumpLogOnFailure, startEnvd, stopEnvd } from './harness.mjs'

const T = { timeout: 180000 }
const MODE = STRICT ? 'strict' : 'default'
const VENV = '/opt/envd-python' // defaults.PythonVenv
const R_SITE = '/usr/local/lib/R/site-library' // defaults.RLibrary

/** The text a run printed on stdout, failing on an error. */
function stdoutOf(exe) {
  assert.equal(exe.error, undefined, exe.error && `${exe.error.name}: ${exe.error.value}\n${exe.error.traceback}`)
  return exe.logs.stdout.join('')
}

/** commands.run that reports stdout and stderr when the command fails. */
async function run(sbx, cmd, opts = {}) {
  try {
    return await sbx.commands.run(cmd, opts)
  } catch (err) {
    assert.fail(`${cmd} (as ${opts.user ?? 'the default user'}): ${err.message}\nstdout: ${err.stdout ?? ''}\nstderr: ${err.stderr ?? ''}`)
  }
}

describe(`the sandbox's package environment (${MODE} mode)`, () => {
  /** @type {Sandbox} */
  let sbx

  before(async () => {
    assert.ok(fs.existsSync(`${VENV}/bin/python`), `${VENV} is missing: run scripts/install-deps.sh`)
    await startEnvd({ jupyter: true })
    sbx = await Sandbox.create({ debug: true })
  })
  after(() => stopEnvd())
  afterEach((t) => dumpLogOnFailure(t))

  const debianVersion = execFileSync('/usr/bin/python3', ['--version'], { encoding: 'utf8' }).trim()

  it("python --version and pip --version as the default user: the kernels' environment", T, async () => {
    assert.equal((await run(sbx, 'python --version')).stdout.trim(), debianVersion)
    assert.equal((await run(sbx, 'command -v python pip')).stdout.trim(), `${VENV}/bin/python\n${VENV}/bin/pip`)
    assert.match((await run(sbx, 'pip --version')).stdout, new RegExp(`^pip \\S+ from ${VENV}/lib/python3\\.\\d+/site-packages/pip `))
    // Debian's packages stay visible through the system site packages.
    const pandas = await run(sbx, 'python -c "import pandas, sys; print(sys.prefix, pandas.__file__)"')
    assert.match(pandas.stdout.trim(), new RegExp(`^${VENV} /usr/lib/python3/dist-packages/pandas/`))
  })

  it(STRICT ? 'commands get VIRTUAL_ENV, root does not (strict: root never runs what the user can write)' : 'every command gets VIRTUAL_ENV, root included', T, async () => {
    // (A root login shell runs root's own dotfiles after envd's PATH: on
    // CI machines they put pyenv first, so root's checks name the venv.)
    assert.equal((await run(sbx, 'echo "$VIRTUAL_ENV"')).stdout.trim(), VENV)
    assert.equal((await run(sbx, '"$VIRTUAL_ENV/bin/python" --version')).stdout.trim(), debianVersion)
    const root = (await run(sbx, 'echo "venv=$VIRTUAL_ENV rsite=$R_LIBS_SITE"', { user: 'root' })).stdout.trim()
    if (STRICT) {
      assert.equal(root, 'venv= rsite=/usr/lib/R/site-library:/usr/lib/R/library')
    } else {
      assert.match(root, new RegExp(`^venv=${VENV} `))
      assert.equal((await run(sbx, `"${VENV}/bin/python" --version`, { user: 'root' })).stdout.trim(), debianVersion)
    }
  })

  it('the python3 kernel runs the same environment; !pip is its pip', T, async () => {
    const out = stdoutOf(await sbx.runCode('import sys, pandas, matplotlib\nprint(sys.prefix)\n!command -v pip'))
    assert.equal(out.trim(), `${VENV}\n${VENV}/bin/pip`)
  })

  it("R's first library is the site library, writable by the kernels' user", T, async () => {
    const out = stdoutOf(await sbx.runCode('cat(.libPaths()[1], file.access(.libPaths()[1], 2), Sys.info()[["effective_user"]], "\\n")', { language: 'r' }))
    assert.equal(out.trim(), `${R_SITE} 0 ${KERNEL_USER}`)
  })

  it("Deno's npm cache is writable by the kernels' user", T, async () => {
    const code = [
      'const info = JSON.parse(new TextDecoder().decode(new Deno.Command(Deno.execPath(), { args: ["info", "--json"] }).outputSync().stdout))',
      'const probe = Deno.makeTempFileSync({ dir: (Deno.mkdirSync(info.denoDir, { recursive: true }), info.denoDir) })',
      'Deno.removeSync(probe)',
      'console.log(info.denoDir)',
    ].join('\n')
    const out = stdoutOf(await sbx.runCode(code, { language: 'js' }))
    const home = KERNEL_USER === 'root' ? '/root' : '/home/user'
    assert.ok(out.trim().startsWith(`${home}/`), `DENO_DIR ${out.trim()} is not in ${home}`)
  })
})

describe(`installing packages from code (${MODE} mode)`, () => {
  /** @type {Sandbox} */
  let sbx
  let base, venv, rlib, wheels, rTarball, npmTarball, jsProject

  const wheel = (name) => ({ name, dist: name.replaceAll('_', '-') })
  const KERNEL_BANG = wheel('envd_compat_bang')
  const KERNEL_SUB = wheel('envd_compat_sub')
  const COMMAND = wheel('envd_compat_cmd')
  const R_PKG = 'envdCompatTiny'
  const NPM_PKG = 'envd-compat-tiny'

  before(async () => {
    base = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-compat-packages-'))
    fs.chmodSync(base, 0o755)
    venv = path.join(base, 'venv')
    rlib = path.join(base, 'rlib')
    wheels = path.join(base, 'wheels')
    jsProject = path.join(base, 'js')
    // The environment as install-deps.sh builds it, from Debian's python3.
    execFileSync('/usr/bin/python3', ['-m', 'venv', '--system-site-packages', venv])
    fs.mkdirSync(rlib)
    buildWheels()
    rTarball = buildRPackage()
    npmTarball = buildNpmPackage()
    fs.mkdirSync(jsProject)
    fs.writeFileSync(path.join(jsProject, 'package.json'), '{ "private": true }\n')
    // Everything is the default user's, as in the sandbox.
    execFileSync('chown', ['-R', 'user:', base])
    await startEnvd({ jupyter: true, env: { ENVD_PYTHON_VENV: venv, ENVD_R_LIBRARY: rlib } })
    sbx = await Sandbox.create({ debug: true })
  })
  after(async () => {
    try {
      if (sbx) {
        // Uninstall what the tests installed (as root: it may be anyone's).
        const names = [KERNEL_BANG, KERNEL_SUB, COMMAND].map((w) => w.dist).join(' ')
        await run(sbx, `"${venv}/bin/pip" uninstall -y ${names}`, { user: 'root' })
        const left = (await run(sbx, `"${venv}/bin/pip" list --format=freeze`, { user: 'root' })).stdout
        assert.doesNotMatch(left, /envd-compat/i, 'pip uninstall left packages')
        await run(sbx, `Rscript -e 'if (dir.exists(file.path("${rlib}", "${R_PKG}"))) remove.packages("${R_PKG}", lib = "${rlib}")'`, { user: 'root' })
        assert.equal(fs.existsSync(path.join(rlib, R_PKG)), false, 'remove.packages left the R package')
      }
    } finally {
      await stopEnvd()
      fs.rmSync(base, { recursive: true, force: true })
    }
  })
  afterEach((t) => dumpLogOnFailure(t))

  function buildWheels() {
    // A wheel is a zip with the package and its dist-info (METADATA, WHEEL,
    // RECORD with each file's hash); Python's zipfile writes it.
    const script = `
import base64, hashlib, os, sys, zipfile
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for name in sys.argv[2:]:
    dist, version = name.replace("_", "-"), "1.0.0"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"def hello(who):\\n    return '{name} says hello to ' + who\\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\\nName: {dist}\\nVersion: {version}\\nSummary: envd compat test package\\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\\nGenerator: envd-compat\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    }
    record = []
    for p, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{p},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\\n".join(record) + "\\n"
    with zipfile.ZipFile(os.path.join(out, f"{name}-{version}-py3-none-any.whl"), "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
`
    execFileSync('/usr/bin/python3', ['-c', script, wheels, KERNEL_BANG.name, KERNEL_SUB.name, COMMAND.name])
  }

  function buildRPackage() {
    const src = path.join(base, 'rsrc', R_PKG)
    fs.mkdirSync(path.join(src, 'R'), { recursive: true })
    fs.writeFileSync(
      path.join(src, 'DESCRIPTION'),
      `Package: ${R_PKG}\nVersion: 1.0.0\nTitle: An envd Test Package\nDescription: Says hello, for envd's tests.\n` +
        'Author: envd\nMaintainer: envd <envd@example.invalid>\nLicense: MIT\n',
    )
    fs.writeFileSync(path.join(src, 'NAMESPACE'), 'export(tiny_hello)\n')
    fs.writeFileSync(path.join(src, 'R', 'hello.R'), 'tiny_hello <- function(who) paste("R says hello to", who)\n')
    execFileSync('R', ['CMD', 'build', '--no-build-vignettes', '--no-manual', R_PKG], { cwd: path.dirname(src), stdio: 'pipe' })
    return path.join(path.dirname(src), `${R_PKG}_1.0.0.tar.gz`)
  }

  function buildNpmPackage() {
    const src = path.join(base, 'npmsrc')
    fs.mkdirSync(src)
    fs.writeFileSync(path.join(src, 'package.json'), JSON.stringify({ name: NPM_PKG, version: '1.0.0', type: 'module', main: 'index.js' }))
    fs.writeFileSync(path.join(src, 'index.js'), "export function hello(who) { return 'npm says hello to ' + who }\n")
    execFileSync('npm', ['pack', '--silent', '--pack-destination', base], { cwd: src, stdio: 'pipe' })
    return path.join(base, `${NPM_PKG}-1.0.0.tgz`)
  }

  const pipInstall = (w) => `pip install --no-index --find-links ${wheels} ${w.dist}`

  it('!pip install in a python kernel: importable at once', T, async () => {
    const out = stdoutOf(await sbx.runCode(`!${pipInstall(KERNEL_BANG)}\nimport ${KERNEL_BANG.name}\nprint(${KERNEL_BANG.name}.hello('python'))`))
    assert.match(out, /Successfully installed envd-compat-bang-1\.0\.0/)
    assert.match(out, /envd_compat_bang says hello to python\n$/)
    assert.doesNotMatch(out, /externally-managed-environment/)
  })

  it('subprocess.run(["pip", "install", ...]) in a python kernel: importable at once', T, async () => {
    const code =
      'import subprocess\n' +
      `subprocess.run(${JSON.stringify(pipInstall(KERNEL_SUB).split(' '))}, check=True, capture_output=True)\n` +
      `import ${KERNEL_SUB.name}\nprint(${KERNEL_SUB.name}.hello('subprocess'))`
    assert.equal(stdoutOf(await sbx.runCode(code)), 'envd_compat_sub says hello to subprocess\n')
  })

  it('pip install in a command: importable by the same command user, pip list shows every install', T, async () => {
    const res = await run(sbx, pipInstall(COMMAND))
    assert.match(res.stdout, /Successfully installed envd-compat-cmd-1\.0\.0/)
    const imported = await run(sbx, `python -c "import ${COMMAND.name}, ${KERNEL_BANG.name}, ${KERNEL_SUB.name}; print(${COMMAND.name}.hello('command'))"`)
    assert.equal(imported.stdout, 'envd_compat_cmd says hello to command\n')
    // Root names the environment: in strict mode it does not get it.
    for (const [cmd, opts] of [['pip list --format=freeze', {}], [`"${venv}/bin/pip" list --format=freeze`, { user: 'root' }]]) {
      const list = (await run(sbx, cmd, opts)).stdout
      for (const w of [KERNEL_BANG, KERNEL_SUB, COMMAND]) assert.match(list, new RegExp(`^${w.dist}==1\\.0\\.0$`, 'm'), `pip list as ${opts.user ?? 'user'}:\n${list}`)
    }
  })

  it("a kernel imports the command's package at once; a new context imports all", T, async () => {
    const code = [KERNEL_BANG, KERNEL_SUB, COMMAND].map((w) => `import ${w.name}; print(${w.name}.hello('again'))`).join('\n')
    const want = [KERNEL_BANG, KERNEL_SUB, COMMAND].map((w) => `${w.name} says hello to again\n`).join('')
    assert.equal(stdoutOf(await sbx.runCode(code)), want, 'the default context')
    const ctx = await sbx.createCodeContext()
    try {
      assert.equal(stdoutOf(await sbx.runCode(code, { context: ctx })), want, 'a new context')
    } finally {
      await sbx.removeCodeContext(ctx)
    }
  })

  it('install.packages of a local source package in an R kernel: loadable at once and in a new context', T, async () => {
    const install = `install.packages(${JSON.stringify(rTarball)}, repos = NULL, type = "source")\n` + `library(${R_PKG})\ncat(tiny_hello("r"), .libPaths()[1], "\\n")`
    assert.equal(stdoutOf(await sbx.runCode(install, { language: 'r' })).trim(), `R says hello to r ${rlib}`)
    const ctx = await sbx.createCodeContext({ language: 'r' })
    try {
      const out = stdoutOf(await sbx.runCode(`library(${R_PKG})\ncat(tiny_hello("a new context"), "\\n")`, { context: ctx }))
      assert.equal(out.trim(), 'R says hello to a new context')
    } finally {
      await sbx.removeCodeContext(ctx)
    }
    const cmd = await run(sbx, `Rscript -e 'library(${R_PKG}); cat(tiny_hello("a command"))'`)
    assert.equal(cmd.stdout, 'R says hello to a command')
  })

  it('npm install of a local tarball from a Deno kernel: npm: import at once and in a new context', T, async () => {
    const ctx = await sbx.createCodeContext({ language: 'js', cwd: jsProject })
    let ctx2
    try {
      const install = [
        `const r = await new Deno.Command("npm", { args: ["install", "--offline", "--no-audit", "--no-fund", ${JSON.stringify(npmTarball)}] }).output()`,
        'if (r.code !== 0) throw new Error("npm install: " + new TextDecoder().decode(r.stderr))',
      ].join('\n')
      stdoutOf(await sbx.runCode(install, { context: ctx }))
      const use = `import { hello } from "npm:${NPM_PKG}"\nconsole.log(hello("deno"))`
      assert.equal(stdoutOf(await sbx.runCode(use, { context: ctx })), 'npm says hello to deno\n')
      ctx2 = await sbx.createCodeContext({ language: 'js', cwd: jsProject })
      const again = `import { hello } from "npm:${NPM_PKG}"\nconsole.log(hello("a new context"))`
      assert.equal(stdoutOf(await sbx.runCode(again, { context: ctx2 })), 'npm says hello to a new context\n')
    } finally {
      await sbx.removeCodeContext(ctx)
      if (ctx2) await sbx.removeCodeContext(ctx2)
    }
  })
})
