/**
 * A trial load: the bundles of a repository loaded exactly as the server loads them, by the
 * server itself, in this process: a StowageServer limited to those models (models_include), on
 * 127.0.0.1 with ports the system picks, compiling into a temporary cache. Each loaded model then
 * answers one request through real gRPC, hooks and all: zeros, or its bundle's warm-up data
 * where the manifest has some (a model that cannot run on zeros says so with warmup.data). `bundle create` and
 * `bundle check` use it, so that a bundle they pass is one the server takes.
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { InferenceClient, type Tensor } from '../client/client.js';
import { parseNodeConfig } from '../config/load.js';
import { ModelState } from '../node/model-registry.js';
import { StowageServer } from '../node/server.js';
import { splitBytesElements } from '../shared/bytes-elements.js';
import { byDatatype } from '../shared/dtypes.js';
import { createLogger } from '../shared/log.js';
import type { ModelSpec } from '../shared/model-spec.js';

export interface TrialOutput {
  readonly name: string;
  readonly datatype: string;
  readonly shape: readonly number[];
}

/** `request`: what the trial request held, e.g. "zeros" or "the bundle's warm-up data for x". */
export type TrialResult =
  | { readonly model: string; readonly ok: true; readonly inferMs: number; readonly outputs: readonly TrialOutput[]; readonly request: string }
  | { readonly model: string; readonly ok: false; readonly stage: 'load'; readonly reason: string }
  | { readonly model: string; readonly ok: false; readonly stage: 'inference'; readonly reason: string; readonly request: string };

export interface TrialOptions {
  /** Server log level while the trial runs (default silent: the results say what failed). */
  readonly logLevel?: string;
}

/** The device memory a trial needs: room for the bundles' weights three times over, at least 128 MiB. */
function deviceBytes(repo: string, models: readonly string[]): number {
  let bytes = 0;
  for (const model of models) {
    const dir = path.join(repo, model);
    try {
      for (const f of readdirSync(dir)) if (f.endsWith('.onnx')) bytes += statSync(path.join(dir, f)).size;
    } catch {
      // A missing bundle is the server's to report.
    }
  }
  return Math.max(128 * 2 ** 20, 3 * bytes + 64 * 2 ** 20);
}

/**
 * One request for a model's client inputs, batch size 1 where the tensor batches: the bundle's
 * warm-up row (manifest warmup.data) for an input the executable takes as the client sends it
 * (same name, datatype and shape: no hook between), zeros for every other.
 */
function trialInputs(spec: ModelSpec): { tensors: Tensor[]; request: string } {
  const fromBundle: string[] = [];
  const tensors = spec.clientInputs.map((t): Tensor => {
    const shape = t.shape.map((d, i) => (i === t.batchDim ? 1 : d));
    const count = shape.reduce((a, b) => a * b, 1);
    const info = byDatatype(t.datatype)!;
    const executable = spec.inputs.find((e) => e.name === t.name);
    const row = executable && executable.datatype === t.datatype && executable.shape.join() === t.shape.join() ? spec.warmupData[t.name] : undefined;
    if (row) {
      fromBundle.push(t.name);
      // copy: the bundle's warm-up row into its own buffer, aligned for its typed view (BYTES framing checked at parse)
      return { name: t.name, datatype: t.datatype, shape, data: info.typedArray ? new info.typedArray(row.slice().buffer) : splitBytesElements(row)! };
    }
    const data = info.typedArray ? new info.typedArray(count) : Array.from({ length: count }, () => new Uint8Array(0));
    return { name: t.name, datatype: t.datatype, shape, data };
  });
  const others = spec.clientInputs.length > fromBundle.length ? ', zeros for the rest' : '';
  return { tensors, request: fromBundle.length ? `the bundle's warm-up data for ${fromBundle.join(', ')}${others}` : 'zeros' };
}

/** Load `models` of `repo` in a server of their own, run each once (trialInputs), stop the server. */
export async function trialLoad(repo: string, models: readonly string[], options: TrialOptions = {}): Promise<TrialResult[]> {
  const cacheDir = mkdtempSync(path.join(os.tmpdir(), 'stowage-trial-'));
  const node = {
    model_repo: repo,
    cache_dir: cacheDir,
    models_include: models,
    gpus: 1,
    global: {
      model_control_mode: 'static',
      logging: { level: options.logLevel ?? 'silent' },
      runtime: { cpu_device_memory_bytes: deviceBytes(repo, models), preallocate: false },
      endpoints: { host: '127.0.0.1', grpc_port: 0, http_port: 0, admin_port: 0 },
    },
  };
  // JSON is YAML: the node file the trial would be, validated like any other.
  const { config } = parseNodeConfig(JSON.stringify(node), '(trial load)', {});
  let server: StowageServer | undefined;
  try {
    server = await StowageServer.start(config, createLogger(config.global.logging.level));
    const client = new InferenceClient(`127.0.0.1:${server.ports.grpc}`);
    const results: TrialResult[] = [];
    try {
      for (const model of models) {
        const record = server.registry.get(model);
        if (!record || record.state !== ModelState.READY || !record.spec) {
          results.push({ model, ok: false, stage: 'load', reason: record?.reason || 'not found in the repository' });
          continue;
        }
        const { tensors, request } = trialInputs(record.spec);
        const started = performance.now();
        try {
          const { outputs } = await client.infer(model, tensors, { timeoutMs: 60_000 });
          results.push({
            model, ok: true, inferMs: performance.now() - started, request,
            outputs: outputs.map((o) => ({ name: o.name, datatype: o.datatype, shape: o.shape })),
          });
        } catch (err) {
          results.push({ model, ok: false, stage: 'inference', request, reason: (err as { details?: string }).details || (err as Error).message });
        }
      }
    } finally {
      client.close();
    }
    return results;
  } finally {
    await server?.stop(1000);
    rmSync(cacheDir, { recursive: true, force: true });
  }
}
