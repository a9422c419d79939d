/**
 * The KServe service of a gateway-only process: requests are forwarded to the
 * remote nodes unchanged (raw bytes both ways; the gateway reads only the
 * model name to route by), and the answers come back unchanged.
 *
 * - ModelInfer, ModelReady, ModelMetadata, ModelConfig: to a node serving the
 *   model ready, `round_robin` or
 *   `least_outstanding` among them. A node that fails with UNAVAILABLE and then
 *   does not answer its health check is marked down and the call goes to
 *   another node serving the model; with none left it fails UNAVAILABLE at once.
 * - ModelStreamInfer: each request of the client's stream goes to a node
 *   serving its model, over one upstream stream per node; answers are merged
 *   back. If a node's stream fails, each of its unanswered requests gets an
 *   error_message on the client's stream, which lives on.
 * - ServerLive, ServerReady (any node up), ServerMetadata and LogSettings are
 *   the gateway's own; RepositoryIndex merges every node's, ModelStatistics sums
 *   every node's per model; RepositoryModelLoad/Unload go to every node up.
 * - Shared memory is local to a machine: those RPCs say to use the node.
 */
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { SERVER_NAME } from '../constants.js';
import { errors, errorToStatus, StowageError } from '../errors.js';
import type { Admission } from '../protocol/admission.js';
import { applyLogSettings, currentLogSettings } from '../protocol/log-settings.js';
import { logFailure } from '../protocol/unary.js';
import { readFields, readString } from '../weights/protobuf-wire.js';
import type { RemoteNode } from './remote-node.js';
import { mergeStatistics } from './statistics-merge.js';

const SERVICE = '/inference.GRPCInferenceService/';

/** What forwarding needs of an incoming call: its deadline and metadata. */
type IncomingCall = Pick<grpc.ServerUnaryCall<Buffer, Buffer>, 'getDeadline' | 'metadata'>;

export interface ProxyContext {
  nodes: readonly RemoteNode[];
  mode: 'round_robin' | 'least_outstanding';
  /** The service as proto-loader defines it: encodes and decodes what the gateway answers itself. */
  definition: grpc.ServiceDefinition;
  admission: Admission;
  logger: Logger;
  version: string;
  /** Deadline of a forwarded call whose client set none. */
  requestTimeoutMs: number;
  /** How long a node gets to answer the health check after it failed a call. */
  healthTimeoutMs: number;
}

/** The field of each model-scoped request that names the model. */
const MODEL_FIELD: Record<string, number> = {
  ModelInfer: 1,
  ModelStreamInfer: 1,
  ModelReady: 1,
  ModelMetadata: 1,
  ModelConfig: 1,
  ModelStatistics: 1,
};

/**
 * The string fields the gateway routes by (model name, request id). The bytes are the client's,
 * unchecked: a message that is not protobuf is INVALID_ARGUMENT, never a crash.
 */
function stringFields(bytes: Buffer, rpc: string, ...numbers: number[]): string[] {
  let fields;
  try {
    fields = readFields(bytes);
  } catch (err) {
    throw errors.invalidRequest(`${rpc}: the request is not a valid protobuf message (${(err as Error).message})`);
  }
  return numbers.map((n) => readString(fields, n) ?? '');
}

/** The same service with raw bytes in and out: what the gateway registers. */
export function rawDefinition(definition: grpc.ServiceDefinition): grpc.ServiceDefinition {
  const raw = (b: Buffer) => b;
  return Object.fromEntries(Object.entries(definition).map(([name, m]) => [name, { ...m, requestDeserialize: raw, responseSerialize: raw }]));
}

export function createProxyHandlers(ctx: ProxyContext): grpc.UntypedServiceImplementation {
  const { nodes, definition, logger } = ctx;
  let next = 0;
  const encode = (rpc: string, message: unknown) => definition[rpc].responseSerialize(message);
  const decode = (rpc: string, bytes: Buffer) => definition[rpc].responseDeserialize(bytes) as Record<string, unknown>;
  const decodeRequest = (rpc: string, bytes: Buffer) => definition[rpc].requestDeserialize(bytes) as Record<string, unknown>;
  const upNodes = () => nodes.filter((n) => n.up);

  /** The node for a request for `model`, skipping `tried`. */
  function pick(model: string, tried: ReadonlySet<RemoteNode> = new Set()): RemoteNode {
    const candidates = nodes.filter((n) => n.serves(model) && !tried.has(n));
    if (candidates.length === 0) {
      const up = upNodes();
      if (up.length === 0) throw new StowageError('STOWAGE_DEVICE_UNAVAILABLE', `no node is up (nodes: ${nodes.map((n) => n.address).join(', ')})`);
      if (tried.size > 0) throw new StowageError('STOWAGE_DEVICE_UNAVAILABLE', `every node serving model ${JSON.stringify(model)} failed (${[...tried].map((n) => n.address).join(', ')})`);
      const known = [...new Set(up.flatMap((n) => n.models))].sort();
      throw errors.modelNotFound(model, known);
    }
    if (ctx.mode === 'least_outstanding') return candidates.reduce((a, b) => (b.inflight < a.inflight ? b : a));
    return candidates[next++ % candidates.length];
  }

  const deadlineOf = (call: IncomingCall): grpc.Deadline => {
    const d = call.getDeadline();
    return d === Infinity ? Date.now() + ctx.requestTimeoutMs : d;
  };

  /** Did the node fail (it does not answer its health check), rather than answer UNAVAILABLE itself? */
  async function nodeFailed(node: RemoteNode, err: grpc.ServiceError): Promise<boolean> {
    if (err.code !== grpc.status.UNAVAILABLE) return false;
    await node.refresh(ctx.healthTimeoutMs);
    if (!node.up) logger.warn({ node: node.address, err: err.details }, 'node marked down: it failed a call and its health check');
    return !node.up;
  }

  /** Forward a model-scoped unary call; on a node failure, to the next node serving the model. */
  function forwardByModel(rpc: string): grpc.handleUnaryCall<Buffer, Buffer> {
    return (call, callback) => {
      let model: string;
      try {
        [model] = stringFields(call.request, rpc, MODEL_FIELD[rpc]);
      } catch (err) {
        callback(logFailure(logger, rpc, err));
        return;
      }
      const tried = new Set<RemoteNode>();
      const attempt = async (): Promise<Buffer> => {
        const node = pick(model, tried);
        tried.add(node);
        try {
          return await node.unary(SERVICE + rpc, call.request, call.metadata, deadlineOf(call));
        } catch (err) {
          if (await nodeFailed(node, err as grpc.ServiceError)) return attempt();
          throw err;
        }
      };
      const inference = rpc === 'ModelInfer';
      if (inference) {
        try {
          ctx.admission.enter();
        } catch (err) {
          callback(logFailure(logger, rpc, err));
          return;
        }
      }
      attempt().then((res) => callback(null, res), (err) => callback(isServiceError(err) ? err : logFailure(logger, rpc, err)))
        .finally(() => inference && ctx.admission.leave());
    };
  }

  /** Answer from the gateway itself. */
  function local(rpc: string, fn: (req: Record<string, unknown>) => unknown | Promise<unknown>): grpc.handleUnaryCall<Buffer, Buffer> {
    return (call, callback) => {
      Promise.resolve().then(() => fn(decodeRequest(rpc, call.request)))
        .then((res) => callback(null, encode(rpc, res)), (err) => callback(logFailure(logger, rpc, err)));
    };
  }

  /** Ask every node that is up; answers (and failures) per node. */
  async function everyNode(rpc: string, request: Buffer, call: IncomingCall) {
    return Promise.allSettled(upNodes().map((n) => n.unary(SERVICE + rpc, request, call.metadata, deadlineOf(call))));
  }

  const handlers: grpc.UntypedServiceImplementation = {
    ServerLive: local('ServerLive', () => ({ live: true })),
    ServerReady: local('ServerReady', () => ({ ready: upNodes().length > 0 })),
    ServerMetadata: local('ServerMetadata', () => ({ name: `${SERVER_NAME}-gateway`, version: ctx.version, extensions: ['model_configuration', 'statistics'] })),
    LogSettings: local('LogSettings', (req) => {
      const settings = req.settings as Parameters<typeof applyLogSettings>[1];
      return { settings: Object.keys(settings).length ? applyLogSettings(logger, settings) : currentLogSettings(logger) };
    }),
    RepositoryIndex: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      everyNode('RepositoryIndex', call.request, call).then((answers) => {
        // One entry per model: a node's READY entry wins over another's UNAVAILABLE.
        const merged = new Map<string, Record<string, unknown>>();
        for (const a of answers) {
          if (a.status !== 'fulfilled') continue;
          for (const m of decode('RepositoryIndex', a.value).models as Record<string, unknown>[]) {
            const seen = merged.get(m.name as string);
            if (!seen || (seen.state !== 'READY' && m.state === 'READY')) merged.set(m.name as string, m);
          }
        }
        callback(null, encode('RepositoryIndex', { models: [...merged.values()].sort((a, b) => String(a.name).localeCompare(String(b.name))) }));
      }, (err) => callback(logFailure(logger, 'RepositoryIndex', err)));
    },
    ModelStatistics: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      // Every node's statistics for the model (or for every model), summed: one entry per model.
      let model: string;
      try {
        [model] = stringFields(call.request, 'ModelStatistics', 1);
      } catch (err) {
        callback(logFailure(logger, 'ModelStatistics', err));
        return;
      }
      const serving = model === '' ? upNodes() : nodes.filter((n) => n.serves(model));
      if (model !== '' && serving.length === 0) return forwardByModel('ModelStatistics')(call, callback); // its NOT_FOUND or UNAVAILABLE
      Promise.allSettled(serving.map((n) => n.unary(`${SERVICE}ModelStatistics`, call.request, call.metadata, deadlineOf(call)))).then((answers) => {
        const ok = answers.filter((a): a is PromiseFulfilledResult<Buffer> => a.status === 'fulfilled');
        if (ok.length === 0 && answers.length > 0) return callback((answers[0] as PromiseRejectedResult).reason);
        const stats = ok.flatMap((a) => decode('ModelStatistics', a.value).model_stats as Record<string, unknown>[]);
        callback(null, encode('ModelStatistics', { model_stats: mergeStatistics(stats) }));
      }, (err) => callback(logFailure(logger, 'ModelStatistics', err)));
    },
    ModelInfer: forwardByModel('ModelInfer'),
    ModelReady: forwardByModel('ModelReady'),
    ModelMetadata: forwardByModel('ModelMetadata'),
    ModelConfig: forwardByModel('ModelConfig'),
    ModelStreamInfer: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => proxyStream(call),
  };
  for (const rpc of ['RepositoryModelLoad', 'RepositoryModelUnload']) {
    handlers[rpc] = (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      everyNode(rpc, call.request, call).then((answers) => {
        const ok = answers.find((a) => a.status === 'fulfilled');
        if (ok) return callback(null, (ok as PromiseFulfilledResult<Buffer>).value);
        const failed = answers.find((a): a is PromiseRejectedResult => a.status === 'rejected');
        callback(failed ? failed.reason : logFailure(logger, rpc, new StowageError('STOWAGE_DEVICE_UNAVAILABLE', 'no node is up')));
      }, (err) => callback(logFailure(logger, rpc, err)));
    };
  }
  for (const rpc of ['SystemSharedMemoryStatus', 'SystemSharedMemoryRegister', 'SystemSharedMemoryUnregister', 'CudaSharedMemoryStatus', 'CudaSharedMemoryRegister', 'CudaSharedMemoryUnregister']) {
    handlers[rpc] = local(rpc, () => {
      throw errors.unsupported(`${rpc}: shared memory is local to one machine; this is a gateway in front of remote nodes, so register regions with the node that serves your model`);
    });
  }
  for (const [name, method] of Object.entries(definition)) {
    if (handlers[name]) continue;
    handlers[name] = method.requestStream || method.responseStream
      ? (call: grpc.ServerDuplexStream<Buffer, Buffer>) => call.emit('error', errorToStatus(errors.unimplementedRpc(name)))
      : local(name, () => {
        throw errors.unimplementedRpc(name);
      });
  }

  /** ModelStreamInfer: each request to a node serving its model, over one upstream stream per node. */
  function proxyStream(call: grpc.ServerDuplexStream<Buffer, Buffer>): void {
    try {
      ctx.admission.enter();
    } catch (err) {
      call.emit('error', logFailure(logger, 'ModelStreamInfer', err));
      return;
    }
    interface Upstream { stream: Promise<grpc.ClientDuplexStream<Buffer, Buffer>>; pending: Map<string, string> }
    const upstreams = new Map<RemoteNode, Upstream>();
    let clientEnded = false;
    let finished = false;
    const finish = () => {
      if (finished || !clientEnded || upstreams.size > 0) return;
      finished = true;
      ctx.admission.leave();
      call.end();
    };
    const answerError = (id: string, model: string, message: string) => {
      call.write(encode('ModelStreamInfer', { error_message: message, infer_response: { id, model_name: model } }));
    };
    const open = (node: RemoteNode): Upstream => {
      const upstream: Upstream = { stream: node.stream(`${SERVICE}ModelStreamInfer`, call.metadata, deadlineOf(call)), pending: new Map() };
      upstreams.set(node, upstream);
      upstream.stream.then((stream) => {
        stream.on('data', (bytes: Buffer) => {
          const fields = readFields(bytes);
          const response = fields.find((f) => f.field === 2);
          const id = response ? readString(readFields(response.payload), 3) ?? '' : '';
          upstream.pending.delete(id);
          call.write(bytes);
        });
        const done = (err?: grpc.ServiceError) => {
          if (upstreams.get(node) !== upstream) return;
          upstreams.delete(node);
          if (err && err.code !== grpc.status.CANCELLED) {
            void nodeFailed(node, err);
            for (const [id, model] of upstream.pending) answerError(id, model, `node ${node.address} failed while the request was in flight: ${err.details}`);
          }
          finish();
        };
        stream.on('error', done);
        stream.on('end', () => done());
      }, (err: Error) => {
        upstreams.delete(node);
        for (const [id, model] of upstream.pending) answerError(id, model, `cannot reach node ${node.address}: ${err.message}`);
        finish();
      });
      return upstream;
    };
    call.on('data', (bytes: Buffer) => {
      let model = '';
      let id = '';
      let node: RemoteNode;
      try {
        [model, id] = stringFields(bytes, 'ModelStreamInfer', 1, 3);
        node = pick(model);
      } catch (err) {
        answerError(id, model, errorToStatus(err).details);
        return;
      }
      const upstream = upstreams.get(node) ?? open(node);
      upstream.pending.set(id, model);
      void upstream.stream.then((s) => s.write(bytes), () => undefined);
    });
    call.on('end', () => {
      clientEnded = true;
      for (const u of upstreams.values()) void u.stream.then((s) => s.end(), () => undefined);
      finish();
    });
    call.on('cancelled', () => {
      for (const u of upstreams.values()) void u.stream.then((s) => s.cancel(), () => undefined);
      if (!finished) {
        finished = true;
        ctx.admission.leave();
      }
    });
  }

  return handlers;
}

function isServiceError(err: unknown): err is grpc.ServiceError {
  return typeof err === 'object' && err !== null && 'code' in err && typeof (err as { code: unknown }).code === 'number' && 'details' in err && !(err instanceof StowageError);
}
