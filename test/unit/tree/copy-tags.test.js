// Every copy of bytes that src/ writes is marked `// copy:` (on its line or the line above), so the
// copy ledger (the table at the top of src/shared/request-path.ts, counted by copies.test.js) can be
// read off the code. Found by the types of the expressions, through the TypeScript compiler's API
// (ts-morph: TypeScript 7's compiler has no API), so a Map's `.set` or a string's `.slice` is not
// taken for a copy and a typed array's is, whatever the variable is called:
//   - `.set(`, `.slice(`, `.copyWithin(`, `.copy(` on a typed array or Buffer (`.slice` on an
//     ArrayBuffer too; Buffer's own `.slice` is a view, not a copy);
//   - `Buffer.concat(`; `Buffer.from(` and `new <TypedArray>(` of a typed array, a DataView or an
//     array (of an ArrayBuffer they are views; of a number, a fresh allocation); `<TypedArray>.from(`;
//   - the binding's device copies: `copyFromHost`, `copyToHost`, `moveWithin` on DeviceMemory;
//   - in the native sources, `memcpy` and `memmove`.
import path from 'node:path';
import test from 'ava';
import { Project, SyntaxKind, ts } from 'ts-morph';
import { filesUnder, readSource, splitComments } from '../../helpers/source-tree.js';
import { ROOT } from '../../helpers/server.js';

const TYPED_ARRAYS = new Set(['Uint8Array', 'Int8Array', 'Uint16Array', 'Int16Array', 'Uint32Array', 'Int32Array', 'Float16Array', 'Float32Array', 'Float64Array', 'BigInt64Array', 'BigUint64Array', 'Uint8ClampedArray']);
const DEVICE_COPIES = new Set(['copyFromHost', 'copyToHost', 'moveWithin']);

/**
 * @param {import('ts-morph').Type} type
 * @param {(name: string) => boolean} named
 * @returns {boolean}
 */
const anyOf = (type, named) => (type.isUnion() ? type.getUnionTypes().some((u) => anyOf(u, named)) : named(type.getSymbol()?.getName() ?? ''));
/** @param {import('ts-morph').Type} type */
const isTypedArray = (type) => anyOf(type, (n) => TYPED_ARRAYS.has(n));
/** @param {import('ts-morph').Type} type */
const isBuffer = (type) => anyOf(type, (n) => n === 'Buffer');
/** @param {import('ts-morph').Type} type */
const isArrayBuffer = (type) => anyOf(type, (n) => n === 'ArrayBuffer' || n === 'SharedArrayBuffer');
/** What a `Buffer.from` or typed-array constructor copies from: bytes or elements, not a string, a number or an ArrayBuffer. @param {import('ts-morph').Type} type */
const isCopiedSource = (type) => isTypedArray(type) || isBuffer(type) || type.isArray() || anyOf(type, (n) => n === 'DataView');

/**
 * The copies in the TypeScript sources, by file and line, with what each is.
 * @returns {{ file: string, line: number, what: string }[]}
 */
function copiesInTypeScript() {
  const project = new Project({
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, types: ['node'], skipLibCheck: true },
    skipAddingFilesFromTsConfig: true,
  });
  project.addSourceFilesAtPaths([path.join(ROOT, 'src/**/*.ts'), `!${path.join(ROOT, 'src/**/*.d.ts')}`]);
  const found = [];
  for (const source of project.getSourceFiles()) {
    const file = path.relative(ROOT, source.getFilePath());
    for (const call of source.getDescendantsOfKind(SyntaxKind.CallExpression)) {
      const callee = call.getExpression();
      if (!callee.isKind(SyntaxKind.PropertyAccessExpression)) continue;
      const name = callee.getName();
      const receiver = callee.getExpression();
      const args = call.getArguments();
      let what = null;
      if (receiver.getText() === 'Buffer') {
        if (name === 'concat') what = 'Buffer.concat';
        else if (name === 'from' && args.length === 1 && isCopiedSource(args[0].getType())) what = `Buffer.from(${args[0].getType().getText()})`;
      } else if (TYPED_ARRAYS.has(receiver.getText()) && name === 'from') {
        what = `${receiver.getText()}.from`;
      } else if (['set', 'slice', 'copyWithin', 'copy'].includes(name)) {
        const type = receiver.getType();
        const typed = isTypedArray(type) || (isBuffer(type) && name !== 'slice') || (name === 'slice' && isArrayBuffer(type));
        if (typed) what = `${name} on ${type.getText()}`;
      } else if (DEVICE_COPIES.has(name) && anyOf(receiver.getType(), (n) => n === 'DeviceMemory')) {
        what = `DeviceMemory#${name}`;
      }
      if (what) found.push({ file, line: call.getStartLineNumber(), what });
    }
    for (const made of source.getDescendantsOfKind(SyntaxKind.NewExpression)) {
      const args = made.getArguments();
      if (args.length !== 1 || !isTypedArray(made.getType())) continue;
      if (isCopiedSource(args[0].getType())) found.push({ file, line: made.getStartLineNumber(), what: `new ${made.getExpression().getText()}(${args[0].getType().getText()})` });
    }
  }
  return found;
}

/** The copies in the native sources (memcpy, memmove), by file and line. */
function copiesInNative() {
  const found = [];
  for (const file of filesUnder('src/native', /\.(cc|h)$/)) {
    const lines = splitComments(readSource(file)).code.split('\n');
    for (const [i, line] of lines.entries()) {
      const m = /\b(memcpy|memmove)\s*\(/.exec(line);
      if (m) found.push({ file, line: i + 1, what: m[1] });
    }
  }
  return found;
}

/** Whether `file`'s line `line` (1-based), or the line above, carries a `copy:` comment. */
function tagged(/** @type {string} */ file, /** @type {number} */ line) {
  const comments = splitComments(readSource(file)).comments.split('\n');
  return [line - 1, line - 2].some((i) => i >= 0 && /\bcopy:/.test(comments[i] ?? ''));
}

test('every copy primitive in src/ is tagged `copy:` on its line or the line above', (t) => {
  const copies = [...copiesInTypeScript(), ...copiesInNative()];
  const untagged = copies.filter((c) => !tagged(c.file, c.line)).map((c) => `${c.file}:${c.line} ${c.what}`);
  t.deepEqual(untagged, [], 'copies without a `// copy:` tag saying what is copied and why');
  // The check sees the copies it is for (it would pass vacuously on a broken reader).
  t.true(copies.some((c) => c.what === 'Buffer.concat'));
  t.true(copies.some((c) => c.what.startsWith('set on Uint8Array')));
  t.true(copies.some((c) => c.what === 'memcpy'));
  t.true(copies.some((c) => c.what === 'DeviceMemory#copyFromHost'));
  t.log(`${copies.length} copies in src/, each tagged`);
});

test('the reader tells copies from look-alikes: a Map\'s set, a string\'s slice, an allocation, a view', (t) => {
  const project = new Project({ compilerOptions: { strict: true, types: ['node'], target: ts.ScriptTarget.ES2022 }, useInMemoryFileSystem: false, skipAddingFilesFromTsConfig: true });
  project.createSourceFile(path.join(ROOT, 'src', '__copy-check-probe.ts'), [
    'const m = new Map<string, number>(); m.set("a", 1);',
    'const s = "abc".slice(1);',
    'const u = new Uint8Array(16);',
    'const v = new Uint8Array(u.buffer, 0, 8);',
    'const w = Buffer.from(u.buffer, 0, 8);',
    'u.set(v, 8);',
    'const x = new Uint8Array(u);',
    'const y = u.slice(2);',
  ].join('\n'), { overwrite: true });
  const source = project.getSourceFiles()[0];
  const seen = source.getDescendantsOfKind(SyntaxKind.CallExpression).filter((c) => {
    const callee = c.getExpression();
    return callee.isKind(SyntaxKind.PropertyAccessExpression) && ['set', 'slice'].includes(callee.getName()) && isTypedArray(callee.getExpression().getType());
  }).map((c) => c.getStartLineNumber());
  t.deepEqual(seen, [6, 8], 'u.set and u.slice, not the Map\'s set or the string\'s slice');
  const made = source.getDescendantsOfKind(SyntaxKind.NewExpression).filter((n) => n.getArguments().length === 1 && isCopiedSource(n.getArguments()[0].getType())).map((n) => n.getStartLineNumber());
  t.deepEqual(made, [7], 'new Uint8Array(u) copies; of a number it allocates, of an ArrayBuffer it views');
});
