// speedscope_import.js: loads a speedscope file with speedscope's own
// importer, headless, in node (test/e2e/formats.py).
//
// Usage: node speedscope_import.js BUNDLE FILE
//   BUNDLE: the npm package's dist/release/speedscope-*.js (a browser
//   bundle; its importer is not exported). The bundle is evaluated in a
//   sandbox whose document and window absorb everything, with one line
//   added at the top of its scope that hands out the function speedscope
//   calls on a file carrying its $schema ("Importing as speedscope json
//   file") and the lazy initializer of that function's module; both are
//   found by what the bundle says around them, not by their minified names.
// Prints one JSON line: {"profiles": [{"name", "total", "samples",
// "stacks": {"a;b;c": weight, ...}}], "warnings": [...]}; any warning or
// error speedscope logs while importing is listed and the exit status is 1.
'use strict'
const fs = require('fs')
const vm = require('vm')

function fail(msg) {
  process.stderr.write('speedscope_import: ' + msg + '\n')
  process.exit(2)
}

const [bundlePath, filePath] = process.argv.slice(2)
if (!bundlePath || !filePath) fail('usage: speedscope_import.js BUNDLE FILE')
let src = fs.readFileSync(bundlePath, 'utf8')

const m = /"Importing as speedscope json file"\),(\w+)\((\w+)\)/.exec(src)
if (!m) fail('the bundle has no speedscope-file importer where expected')
const imp = m[1]
const def = src.indexOf('function ' + imp + '(')
if (def < 0) fail('no definition of ' + imp)
const init = /var (\w+)=\w+\(\(\)=>\{"use strict";/g
init.lastIndex = def
const mi = init.exec(src)
if (!mi) fail('no module initializer after ' + imp)
const head = '"use strict";(()=>{'
if (!src.startsWith(head)) fail('unexpected bundle start')
src = head + `globalThis.__wp=()=>[${imp},${mi[1]}];` + src.slice(head.length)

// Everything the page's code may touch at load: a stub that accepts any
// property, call or construction.
function absorb() {
  const f = function () {}
  return new Proxy(f, {
    get: (t, k) => (k === Symbol.toPrimitive ? () => '' : k === Symbol.iterator ? undefined : absorb()),
    apply: () => absorb(),
    construct: () => absorb(),
    set: () => true,
    has: () => true,
  })
}
const warnings = []
const logs = []
const sandboxConsole = {
  log: (...a) => logs.push(a.join(' ')),
  info: (...a) => logs.push(a.join(' ')),
  debug: () => {},
  warn: (...a) => warnings.push('warn: ' + a.join(' ')),
  error: (...a) => warnings.push('error: ' + a.join(' ')),
}
const sandbox = {
  console: sandboxConsole,
  window: absorb(),
  document: absorb(),
  navigator: { userAgent: 'node', platform: 'Linux' },
  location: absorb(),
  localStorage: absorb(),
  requestAnimationFrame: () => 0,
  setTimeout: () => 0,
  clearTimeout: () => {},
  setInterval: () => 0,
  addEventListener: () => {},
  TextDecoder, TextEncoder, URL, Uint8Array, Math, JSON, Promise,
}
sandbox.globalThis = sandbox
sandbox.self = sandbox
vm.createContext(sandbox)
try {
  vm.runInContext(src, sandbox, { filename: 'speedscope.js' })
} catch (e) {
  // The page's own start-up (rendering) fails without a DOM; the
  // importer's module is initialized on demand below.
}
if (typeof sandbox.__wp !== 'function') fail('the bundle did not run far enough')
const [importer, initModule] = sandbox.__wp()
initModule()
// What the page logged at start-up without a DOM is not the file's doing.
warnings.length = 0

const text = fs.readFileSync(filePath, 'utf8')
let obj
try {
  obj = JSON.parse(text)
} catch (e) {
  fail('not JSON: ' + e.message)
}
if (obj.$schema !== 'https://www.speedscope.app/file-format-schema.json') fail('no speedscope $schema')
let group
try {
  group = importer(obj)
} catch (e) {
  warnings.push('error: import threw: ' + e.message)
}
const out = { profiles: [], warnings }
if (group) {
  for (const p of group.profiles) {
    const stacks = {}
    // The call tree in append order: every root-to-leaf path with the
    // weight it ends with (selfWeight), what speedscope draws.
    const walk = (node, path) => {
      const here = node.frame && node.frame.name !== undefined && path !== null ? path.concat(node.frame.name) : []
      if (node.getSelfWeight && node.getSelfWeight() > 0) {
        const k = here.join(';')
        stacks[k] = (stacks[k] || 0) + node.getSelfWeight()
      }
      for (const c of node.children || []) walk(c, here)
    }
    const root = p.getAppendOrderCalltreeRoot()
    for (const c of root.children || []) walk(c, [])
    out.profiles.push({ name: p.getName(), total: p.getTotalWeight(), stacks, unit: p.getWeightUnit() })
  }
}
process.stdout.write(JSON.stringify(out) + '\n')
process.exit(warnings.length ? 1 : 0)
