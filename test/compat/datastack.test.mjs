// The data stack the image ships (scripts/install-deps.sh, APT_PKGS_FULL:
// Debian's packages) imports in a Python context, as agent-written code
// assumes: each module, its version printed.
import { after, afterEach, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { STRICT, dumpLogOnFailure, startEnvd, stopEnvd } from './harness.mjs'

// Import name -> what users call it.
const modules = {
  numpy: 'numpy', pandas: 'pandas', matplotlib: 'matplotlib', scipy: 'scipy', sklearn: 'scikit-learn',
  seaborn: 'seaborn', bs4: 'beautifulsoup4', requests: 'requests', openpyxl: 'openpyxl', plotly: 'plotly',
  nltk: 'nltk', cv2: 'opencv', skimage: 'scikit-image', xarray: 'xarray', xlrd: 'xlrd', docx: 'python-docx',
  aiohttp: 'aiohttp', gensim: 'gensim', soundfile: 'soundfile', imageio: 'imageio', joblib: 'joblib',
  pytest: 'pytest', pytz: 'pytz', sympy: 'sympy', statsmodels: 'statsmodels', networkx: 'networkx',
}

describe(`data stack (${STRICT ? 'strict' : 'default'} mode)`, () => {
  let sbx
  before(async () => {
    await startEnvd({ jupyter: true })
    sbx = await Sandbox.create({ debug: true })
  })
  after(async () => {
    await stopEnvd()
  })
  afterEach(dumpLogOnFailure)

  it('imports every module of the stack', { timeout: 240000 }, async () => {
    const code = `import importlib
for name in ${JSON.stringify(Object.keys(modules))}:
    m = importlib.import_module(name)
    print(name, getattr(m, '__version__', '?'))`
    const exec = await sbx.runCode(code, { timeoutMs: 230000 })
    assert.equal(exec.error, undefined, `${exec.error?.name}: ${exec.error?.value}\n${exec.error?.traceback}`)
    const got = exec.logs.stdout.join('').trim().split('\n').map((l) => l.split(' ')[0])
    assert.deepEqual(got, Object.keys(modules))
  })
})
