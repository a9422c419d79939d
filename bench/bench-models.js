// The benchmarks' generated models (tools/make_bench_models.py and tools/specialise_batch.py) need
// a Python with numpy and onnx. Which one differs by machine: this one's .toolchain/export-venv
// (tools/install-export-env.sh) or .venv (test/run.sh), a GPU machine's own python3, or what PYTHON
// names. One lookup for every bench, so a bench that works here works there too.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from '../test/helpers/server.js';

/** @type {string | undefined} */
let found;

/**
 * The first of PYTHON, .toolchain/export-venv, .venv and python3 that imports numpy and onnx.
 * Throws naming each one tried and how to get one, when none does.
 * @returns {string}
 */
export function benchPython() {
  if (found) return found;
  const candidates = process.env.PYTHON
    ? [process.env.PYTHON]
    : [path.join(ROOT, '.toolchain', 'export-venv', 'bin', 'python'), path.join(ROOT, '.venv', 'bin', 'python'), 'python3'].filter(
        (p) => p === 'python3' || existsSync(p),
      );
  for (const python of candidates) {
    try {
      execFileSync(python, ['-c', 'import numpy, onnx'], { stdio: 'ignore' });
      found = python;
      return python;
    } catch {
      // not this one: no such program, or it lacks numpy or onnx
    }
  }
  throw new Error(
    `the bench models need a Python with numpy and onnx; none of ${candidates.join(', ')} has them: ` +
      'run `bash tools/install-export-env.sh`, `pip install -r tools/requirements.txt`, or set PYTHON to one that has them',
  );
}

/**
 * Writes the named models of tools/make_bench_models.py (none named: its default set) as bundles
 * under dir.
 * @param {string} dir
 * @param {string[]} [names]
 * @param {{ quiet?: boolean }} [options]
 */
export function makeBenchModels(dir, names = [], { quiet = false } = {}) {
  execFileSync(benchPython(), [path.join(ROOT, 'tools', 'make_bench_models.py'), dir, ...names], { stdio: quiet ? 'ignore' : 'inherit' });
}
