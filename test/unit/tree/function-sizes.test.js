// No function of src/ runs over MAX_LINES lines (issue 53: a reader takes in a function at once, and
// the start-up and the request path read as named steps). The few still over it are listed with
// the most lines each may have: they may shrink (then lower the ceiling, or drop the line), never
// grow, and no other may join them. Functions are found by the TypeScript parser (ts-morph):
// declarations, methods, constructors, accessors, arrow functions and function expressions, a
// function's lines counted from its first line to its last, its nested functions included.
import path from 'node:path';
import test from 'ava';
import { Node, Project, ts } from 'ts-morph';
import { ROOT } from '../../helpers/server.js';

const MAX_LINES = 80;

/** file:name -> the most lines it may have, and why it is still long. */
const STILL_LONG = new Map([
  ['src/protocol/json-reader.ts:#skip', { lines: 99, why: 'a JSON scanner\'s state machine, one case per token, kept whole so it stays a loop without calls' }],
]);

/**
 * @param {Node} node
 * @returns {string}
 */
function nameOf(node) {
  if (Node.isConstructorDeclaration(node)) return 'constructor';
  const named = /** @type {{ getName?: () => string | undefined }} */ (node).getName?.();
  if (named) return named;
  const parent = node.getParent();
  if (parent && (Node.isVariableDeclaration(parent) || Node.isPropertyAssignment(parent) || Node.isPropertyDeclaration(parent))) return parent.getName();
  // An anonymous function inside a named one: `outer>(anonymous)`.
  const outer = node.getParentWhile((n) => !(Node.isFunctionDeclaration(n) || Node.isMethodDeclaration(n) || Node.isArrowFunction(n) || Node.isFunctionExpression(n)))?.getParent();
  return outer && outer !== node ? `${nameOf(outer)}>(anonymous)` : '(anonymous)';
}

test(`no function of src/ is over ${MAX_LINES} lines, but the few listed, each within its ceiling`, (t) => {
  const project = new Project({ compilerOptions: { target: ts.ScriptTarget.ES2022, allowJs: false }, skipAddingFilesFromTsConfig: true });
  project.addSourceFilesAtPaths([path.join(ROOT, 'src/**/*.ts'), `!${path.join(ROOT, 'src/**/*.d.ts')}`]);
  /** @type {string[]} */
  const over = [];
  /** @type {Set<string>} */
  const seen = new Set();
  for (const source of project.getSourceFiles()) {
    const file = path.relative(ROOT, source.getFilePath());
    source.forEachDescendant((node) => {
      const isFunction = Node.isFunctionDeclaration(node) || Node.isMethodDeclaration(node) || Node.isConstructorDeclaration(node) || Node.isArrowFunction(node)
        || Node.isFunctionExpression(node) || Node.isGetAccessorDeclaration(node) || Node.isSetAccessorDeclaration(node);
      if (!isFunction || !node.getBody()) return;
      const lines = node.getEndLineNumber() - node.getStartLineNumber() + 1;
      if (lines <= MAX_LINES) return;
      const key = `${file}:${nameOf(node)}`;
      const allowed = STILL_LONG.get(key);
      seen.add(key);
      if (!allowed) over.push(`${key} (line ${node.getStartLineNumber()}): ${lines} lines, over ${MAX_LINES}`);
      else if (lines > allowed.lines) over.push(`${key}: ${lines} lines, over its ceiling of ${allowed.lines} (${allowed.why})`);
    });
  }
  t.deepEqual(over, [], 'split these into named steps');
  const shrunk = [...STILL_LONG.keys()].filter((k) => !seen.has(k));
  t.deepEqual(shrunk, [], 'no longer over the limit (or gone): drop them from STILL_LONG');
});
