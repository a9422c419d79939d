// npm run cuda:install (tools/install-cuda.py) on wheels made here, offline (--wheel-dir): the
// provider's two libraries land beside libonnxruntime.so.1, the CUDA libraries in the lib folder,
// the versions are written down, and a provider of another ONNX Runtime version, or wheels without
// cuDNN, are refused with a message that says so. (The real wheels are 1.5 GB: npm run cuda:install
// fetched them from PyPI and test/gpu ran on what it placed, once, by hand.)
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, writeFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { ROOT, tempDir } from '../helpers/server.js';

const run = promisify(execFile);
const SCRIPT = path.join(ROOT, 'tools', 'install-cuda.py');
const NVIDIA = {
  nvidia_cuda_runtime: ['13.0.96', ['cu13/lib/libcudart.so.13']],
  nvidia_cublas: ['13.1.0.3', ['cu13/lib/libcublas.so.13', 'cu13/lib/libcublasLt.so.13']],
  nvidia_curand: ['10.4.0.35', ['cu13/lib/libcurand.so.10']],
  nvidia_cufft: ['12.0.0.61', ['cu13/lib/libcufft.so.12']],
  nvidia_cuda_nvrtc: ['13.0.88', ['cu13/lib/libnvrtc.so.13']],
  nvidia_nvjitlink: ['13.0.88', ['cu13/lib/libnvJitLink.so.13']],
  nvidia_cudnn_cu13: ['9.19.0.56', ['cudnn/lib/libcudnn.so.9', 'cudnn/lib/libcudnn_graph.so.9']],
};

/**
 * A wheel (a zip) holding `files` (path -> text), written with Python's zipfile.
 * @param {string} file
 * @param {Record<string, string>} files
 */
async function wheel(file, files) {
  await run('python3', ['-c', 'import sys, json, zipfile\nz = zipfile.ZipFile(sys.argv[1], "w")\nfor k, v in json.loads(sys.argv[2]).items(): z.writestr(k, v)\nz.close()', file, JSON.stringify(files)]);
}

/**
 * A fake onnxruntime-node folder and wheels; `ortVersion` is the provider wheel's version, `skip` a wheel left out.
 * @param {import('ava').ExecutionContext} t
 * @param {{ ortVersion?: string, skip?: string }} [options]
 */
async function setUp(t, { ortVersion = '1.30.0', skip = '' } = {}) {
  const temp = tempDir();
  t.teardown(temp.cleanup);
  const node = path.join(temp.dir, 'onnxruntime-node');
  const ortDir = path.join(node, 'bin', 'napi-v6', 'linux', 'x64');
  mkdirSync(ortDir, { recursive: true });
  writeFileSync(path.join(node, 'package.json'), JSON.stringify({ name: 'onnxruntime-node', version: '1.30.0' }));
  writeFileSync(path.join(ortDir, 'libonnxruntime.so.1'), 'ort');
  const wheels = path.join(temp.dir, 'wheels');
  mkdirSync(wheels);
  await wheel(path.join(wheels, `onnxruntime_gpu-${ortVersion}-cp312-cp312-manylinux_2_28_x86_64.whl`), {
    'onnxruntime/capi/libonnxruntime_providers_cuda.so': 'cuda provider',
    'onnxruntime/capi/libonnxruntime_providers_shared.so': 'shared',
    'onnxruntime/capi/onnxruntime_pybind11_state.so': 'python only',
  });
  for (const [name, [version, libs]] of Object.entries(NVIDIA)) {
    if (name === skip) continue;
    /** @type {Record<string, string>} */
    const files = { [`nvidia/${libs[0].split('/')[0]}/include/header.h`]: 'not a library', [`nvidia/${libs[0].split('/')[0]}/lib/libstatic.a`]: 'archive' };
    for (const lib of libs) files[`nvidia/${lib}`] = lib;
    await wheel(path.join(wheels, `${name}-${version}-py3-none-manylinux_2_27_x86_64.whl`), files);
  }
  const libDir = path.join(temp.dir, 'lib');
  const install = (/** @type {string[]} */ ...extra) => run('python3', [SCRIPT, '--wheel-dir', wheels, '--ort-dir', ortDir, '--lib-dir', libDir, ...extra]);
  return { ortDir, libDir, install };
}

test('the provider goes beside libonnxruntime.so.1, the CUDA libraries into the lib folder, the versions are written', async (t) => {
  const { ortDir, libDir, install } = await setUp(t);
  const { stdout } = await install();
  t.regex(stdout, /the CUDA provider of ONNX Runtime 1\.30\.0 is beside/);
  t.is(readFileSync(path.join(ortDir, 'libonnxruntime_providers_cuda.so'), 'utf8'), 'cuda provider');
  t.true(existsSync(path.join(ortDir, 'libonnxruntime_providers_shared.so')));
  t.false(existsSync(path.join(ortDir, 'onnxruntime_pybind11_state.so')), 'nothing else of the wheel');
  const libs = readdirSync(libDir).sort();
  t.deepEqual(libs, ['libcublas.so.13', 'libcublasLt.so.13', 'libcudart.so.13', 'libcudnn.so.9', 'libcudnn_graph.so.9', 'libcufft.so.12', 'libcurand.so.10', 'libnvJitLink.so.13', 'libnvrtc.so.13'], 'shared libraries only: no headers, no archives');
  const versions = JSON.parse(readFileSync(path.join(libDir, '..', 'versions.json'), 'utf8'));
  t.is(versions.onnxruntime, '1.30.0');
  t.is(versions['nvidia-cudnn-cu13'], '9.19.0.56');
});

test('a provider of another ONNX Runtime version is refused, naming both', async (t) => {
  const { install } = await setUp(t, { ortVersion: '1.29.0' });
  const err = /** @type {{ code: number, stderr: string }} */ (/** @type {unknown} */ (await t.throwsAsync(install())));
  t.is(err.code, 1);
  t.regex(err.stderr, /onnxruntime_gpu-1\.29\.0.* is ONNX Runtime 1\.29\.0, but onnxruntime-node is 1\.30\.0/);
});

test('wheels without cuDNN are refused, saying which is missing', async (t) => {
  const { install } = await setUp(t, { skip: 'nvidia_cudnn_cu13' });
  const err = /** @type {{ code: number, stderr: string }} */ (/** @type {unknown} */ (await t.throwsAsync(install())));
  t.regex(err.stderr, /no nvidia-cudnn-cu13 wheel in/);
});

test('--provider-only places the provider alone: no CUDA wheel is needed, no lib folder is made', async (t) => {
  const { ortDir, libDir, install } = await setUp(t, { skip: 'nvidia_cudnn_cu13' });
  const { stdout } = await install('--provider-only');
  t.regex(stdout, /the CUDA provider of ONNX Runtime 1\.30\.0 is beside .*provider only/);
  t.regex(stdout, /CUDA 13 and cuDNN 9 must come from the machine/);
  t.is(readFileSync(path.join(ortDir, 'libonnxruntime_providers_cuda.so'), 'utf8'), 'cuda provider');
  t.true(existsSync(path.join(ortDir, 'libonnxruntime_providers_shared.so')));
  t.false(existsSync(libDir), 'the CUDA libraries are the machine\'s');
});
