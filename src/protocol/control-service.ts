/**
 * Stowage's control service (proto/control.proto): the seam a large deployment's own control plane
 * integrates against. Status and scheduling policy work today; residency and compaction belong to
 * the on-demand weight cache and say so until it exists.
 */
import { statSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Gateway } from '../actors/gateway.js';
import { errors, StowageError } from '../errors.js';
import { unary } from './unary.js';
import type { ModelRegistry } from '../model-registry.js';

export interface ControlContext {
  registry: ModelRegistry;
  gateway: Gateway;
  logger: Logger;
  /** The main thread's copy of each model's policy (ModelConfig reads it); SetModelPolicy updates it. */
  policies: Map<string, { weight?: number; max_batch_size?: number }>;
}

function executableBytes(paths: readonly { path: string }[]): number {
  return paths.reduce((sum, e) => {
    try {
      return sum + statSync(e.path).size;
    } catch {
      return sum;
    }
  }, 0);
}

export function createControlHandlers(ctx: ControlContext): grpc.UntypedServiceImplementation {
  const { registry, gateway, logger, policies } = ctx;
  return {
    ModelControlStatus: unary('ModelControlStatus', logger, async (req: { name: string }) => {
      const records = req.name === '' ? registry.all() : [registry.find(req.name)];
      // Every device holds every model: queues add up; costs and policy are read from the first device.
      const reports = await gateway.status();
      const instances = new Map<string, (typeof reports)[number] & { queuedAll: number }>();
      for (const s of reports) {
        const seen = instances.get(s.instance);
        if (seen) seen.queuedAll += s.queued;
        else instances.set(s.instance, { ...s, queuedAll: s.queued });
      }
      return {
        models: records.map((r) => {
          const s = r.instance ? instances.get(r.instance) : undefined;
          return {
            name: r.name,
            state: r.state,
            reason: r.reason,
            instance: r.instance ?? '',
            residency: r.instance ? 'device' : '',
            resident_bytes: String(r.instance && r.spec ? executableBytes(r.spec.executables) : 0),
            device: gateway.devices.length === 1 ? gateway.devices[0].deviceId : -1,
            queue_depth: s?.queuedAll ?? 0,
            learned_cost: (s?.costs ?? []).map((c) => ({ batch_size: c.batchSize, ms: c.ms })),
            weight: s?.weight ?? policies.get(r.name)?.weight ?? 1,
            max_batch_size: s ? (Number.isFinite(s.maxBatchRows) ? s.maxBatchRows : 0) : 0,
          };
        }),
      };
    }),
    SetModelPolicy: unary('SetModelPolicy', logger, async (req: { name: string; weight: number; max_batch_size: number }) => {
      registry.find(req.name);
      if (!(req.weight >= 0) || !Number.isFinite(req.weight)) throw errors.invalidRequest(`weight must be > 0 (or 0 to leave it), got ${req.weight}`);
      const update = {
        ...(req.weight > 0 ? { weight: req.weight } : {}),
        ...(req.max_batch_size > 0 ? { maxBatchSize: req.max_batch_size } : {}),
      };
      await gateway.setPolicy(req.name, update);
      const current = policies.get(req.name) ?? {};
      policies.set(req.name, { ...current, ...(update.weight ? { weight: update.weight } : {}), ...(update.maxBatchSize ? { max_batch_size: update.maxBatchSize } : {}) });
      logger.info({ model: req.name, ...update }, 'model policy changed');
      return {};
    }),
    SetModelResidency: unary('SetModelResidency', logger, () => {
      throw new StowageError('STOWAGE_UNSUPPORTED', 'SetModelResidency needs the on-demand weight cache, which this version does not have: every loaded model is resident on its device');
    }),
    CompactMemory: unary('CompactMemory', logger, () => {
      throw new StowageError('STOWAGE_UNSUPPORTED', 'CompactMemory needs the on-demand weight cache, which this version does not have: there is no weight arena to compact');
    }),
  };
}
