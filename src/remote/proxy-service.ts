/**
 * The KServe RPC table of a gateway-only process: requests are forwarded to
 * the remote nodes unchanged (raw bytes both ways; the gateway reads only the
 * model name to route by), and the answers come back unchanged. The gRPC edge
 * (protocol/edge.ts) wraps every handler, as it does a node's.
 *
 * - ModelInfer, ModelReady, ModelMetadata, ModelConfig: to a node serving the
 *   model ready, `round_robin` or `least_outstanding` among them; `pooled`:
 *   among the nodes the model is placed on (placed-routes.ts), by its shares
 *   where it has them, else least_outstanding (routing/routing.ts). A node that fails with UNAVAILABLE and then
 *   does not answer its health check is marked down and the call goes to
 *   another node serving the model; with none left it fails UNAVAILABLE at once.
 *   A node's refusal for being full (its queue or its admission; the Stowage code in
 *   the trailers says which RESOURCE_EXHAUSTED it is) is retried once on another
 *   node holding the model, never a quota or a deadline refusal.
 * - ModelStreamInfer: each request of the client's stream is forwarded like a
 *   ModelInfer (so each answer belongs to its own request, whatever the
 *   client's request ids) and answered on the stream as it completes; a
 *   failure is that response's error_message, and the stream lives on.
 * - ServerLive, ServerReady (any node up), ServerMetadata and LogSettings are
 *   the gateway's own; RepositoryIndex merges every node's, ModelStatistics sums
 *   every node's per model; RepositoryModelLoad/Unload go to every node up.
 * - Shared memory is local to a machine: those RPCs say to use the node.
 */
import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import type { PlacedRoutes } from './placed-routes.js';
import { Router, type RoutingMode } from '../routing/routing.js';
import { GATEWAY_EXTENSIONS, SERVER_NAME } from '../shared/constants.js';
import { errors, StowageError, type ErrorCode } from '../shared/errors.js';
import { errorCodeOf } from '../protocol/error-code.js';
import { readFields, readString, WireWriter } from '../shared/protobuf-wire.js';
import type { GrpcEdge } from '../protocol/edge.js';
import { applyLogSettings, currentLogSettings } from '../protocol/log-settings.js';
import { inferenceWireSchema } from '../protocol/proto.js';
import type { RemoteNode } from './remote-node.js';
import { mergeStatistics } from './statistics-merge.js';

const SERVICE = '/inference.GRPCInferenceService/';

/** The RPCs forwarded as raw bytes, and the field of each request that names the model. */
const FORWARDED: Record<string, number> = {
  ModelInfer: 1,
  ModelStreamInfer: 1,
  ModelReady: 1,
  ModelMetadata: 1,
  ModelConfig: 1,
};

/** What forwarding needs of an incoming call: its deadline and metadata. */
type IncomingCall = Pick<grpc.ServerUnaryCall<unknown, unknown>, 'getDeadline' | 'metadata'>;

export interface ProxyContext {
  edge: GrpcEdge;
  nodes: readonly RemoteNode[];
  mode: RoutingMode;
  /** pooled: the nodes each model is placed on; among them by the model's shares, else least_outstanding. */
  fleet?: PlacedRoutes;
  /** The service as proto-loader defines it: encodes and decodes what the gateway reads or answers itself. */
  definition: grpc.ServiceDefinition;
  logger: Logger;
  version: string;
  /** Deadline of a forwarded call whose client set none. */
  requestTimeoutMs: number;
  /** How long a node gets to answer the health check after it failed a call. */
  healthTimeoutMs: number;
  /** Requests sent to a second node, by reason: `holder_full` (queue full or busy), `node_failed`. */
  retries?: Counter<'reason'>;
}

/**
 * A node's refusals that say it is full, given before anything ran: the request is retried once on
 * another holder. Never a quota (another node would only spread the tenant's excess), a deadline
 * (no time left to spend) or a device out of memory (a model too large for one node is for all).
 */
const FULL_HOLDER: ReadonlySet<ErrorCode> = new Set(['STOWAGE_QUEUE_FULL', 'STOWAGE_SERVER_BUSY']);

/**
 * The string fields the gateway routes by (model name, request id). The bytes are the client's,
 * unchecked: a message that is not protobuf is INVALID_ARGUMENT, never a crash.
 */
function stringFields(bytes: Buffer, rpc: string, ...numbers: number[]): string[] {
  let fields;
  try {
    fields = readFields(bytes);
  } catch (err) {
    throw errors.undecodable(rpc, 'protobuf', (err as Error).message);
  }
  return numbers.map((n) => readString(fields, n) ?? '');
}

/** The service as the gateway registers it: the forwarded RPCs with raw bytes in and out, the rest decoded. */
export function proxyDefinition(definition: grpc.ServiceDefinition): grpc.ServiceDefinition {
  const raw = (b: Buffer) => b;
  const schema = inferenceWireSchema();
  return Object.fromEntries(Object.entries(definition).map(([name, m]) => {
    if (!(name in FORWARDED)) return [name, m];
    // Checked as strictly as a node checks it (one status for broken bytes, here or there), then forwarded as it is.
    const type = `inference.${(m as { requestType?: { type?: { name?: string } } }).requestType?.type?.name}`;
    const checked = (b: Buffer) => {
      schema.check(b, type);
      return b;
    };
    return [name, { ...m, requestDeserialize: checked, responseSerialize: raw }];
  }));
}

/** How the gateway reaches its nodes: which node takes a request, forwarding with fail-over, asking every node. */
class Forwarding {
  readonly #ctx: ProxyContext;
  readonly #router: Router;

  constructor(ctx: ProxyContext) {
    this.#ctx = ctx;
    this.#router = new Router(ctx.mode);
  }

  upNodes(): RemoteNode[] {
    return this.#ctx.nodes.filter((n) => n.up && !n.draining);
  }

  /** The node for a request for `model`, skipping `tried`. */
  pick(model: string, tried: ReadonlySet<RemoteNode>): RemoteNode {
    const { nodes, fleet } = this.#ctx;
    const candidates = nodes.filter((n) => n.serves(model) && !tried.has(n));
    if (candidates.length > 0) return fleet ? fleet.pick(model, candidates, this.#router) : this.#router.pick(candidates);
    const up = this.upNodes();
    if (up.length === 0) throw new StowageError('STOWAGE_DEVICE_UNAVAILABLE', `no node is up (nodes: ${nodes.map((n) => n.address).join(', ')})`);
    if (tried.size > 0) throw new StowageError('STOWAGE_DEVICE_UNAVAILABLE', `every node serving model ${JSON.stringify(model)} failed (${[...tried].map((n) => n.address).join(', ')})`);
    throw errors.modelNotFound(model, [...new Set(up.flatMap((n) => n.models))].sort());
  }

  #deadlineOf(call: IncomingCall): grpc.Deadline {
    const d = call.getDeadline();
    return d === Infinity ? Date.now() + this.#ctx.requestTimeoutMs : d;
  }

  /** Did the node fail (it does not answer its health check), rather than answer UNAVAILABLE itself? */
  async #nodeFailed(node: RemoteNode, err: grpc.ServiceError): Promise<boolean> {
    if (err.code !== 14 /* UNAVAILABLE */) return false;
    await node.probe(this.#ctx.healthTimeoutMs, { fresh: true });
    if (!node.up) this.#ctx.logger.warn({ node: node.address, err: err.details }, 'node marked down: it failed a call and its health check');
    return !node.up;
  }

  /**
   * Forward one model-scoped request (as the unary `rpc`) to a node serving the model; on a node
   * failure, to the next. `from` names the RPC it came in on, for messages.
   */
  async forward(rpc: string, request: Buffer, call: IncomingCall, from = rpc): Promise<Buffer> {
    const [model] = stringFields(request, from, FORWARDED[rpc]);
    const tried = new Set<RemoteNode>();
    let fullRetried = false;
    for (;;) {
      const node = this.pick(model, tried);
      tried.add(node);
      try {
        return await node.unary(SERVICE + rpc, request, call.metadata, this.#deadlineOf(call));
      } catch (err) {
        const failed = err as grpc.ServiceError;
        const code = errorCodeOf(failed);
        if (!fullRetried && code !== undefined && FULL_HOLDER.has(code) && this.#anotherHolder(model, tried)) {
          // Refused before anything ran: another holder may have room. Once, so that a fleet that is
          // full everywhere answers RESOURCE_EXHAUSTED rather than passing the request around.
          fullRetried = true;
          this.#ctx.retries?.inc({ reason: 'holder_full' });
          continue;
        }
        if (!(await this.#nodeFailed(node, failed))) throw err;
        this.#ctx.retries?.inc({ reason: 'node_failed' });
      }
    }
  }

  /** Whether a node other than `tried` holds `model`: serves it and, pooled, is one its requests go to. */
  #anotherHolder(model: string, tried: ReadonlySet<RemoteNode>): boolean {
    const { fleet } = this.#ctx;
    return this.#ctx.nodes.some((n) => n.serves(model) && !tried.has(n) && (!fleet || fleet.holds(model, n.address)));
  }

  /** Ask every node that is up (or those `among`); answers (and failures) per node. */
  everyNode(rpc: string, request: unknown, call: IncomingCall, among = this.upNodes()): Promise<PromiseSettledResult<Record<string, unknown>>[]> {
    const m = this.#ctx.definition[rpc];
    const bytes = m.requestSerialize(request);
    return Promise.allSettled(among.map(async (n) => m.responseDeserialize(await n.unary(SERVICE + rpc, bytes, call.metadata, this.#deadlineOf(call))) as Record<string, unknown>));
  }
}

/**
 * Every node's RepositoryIndex as one: one entry per model, a node's READY entry winning over another's UNAVAILABLE.
 */
function mergedIndex(answers: PromiseSettledResult<Record<string, unknown>>[]) {
  const merged = new Map<string, Record<string, unknown>>();
  for (const a of answers) {
    if (a.status !== 'fulfilled') continue;
    for (const m of a.value.models as Record<string, unknown>[]) {
      const seen = merged.get(m.name as string);
      if (!seen || (seen.state !== 'READY' && m.state === 'READY')) merged.set(m.name as string, m);
    }
  }
  return { models: [...merged.values()].sort((a, b) => String(a.name).localeCompare(String(b.name))) };
}

/** Every node's statistics for the model (or for every model), summed: one entry per model. */
async function summedStatistics(f: Forwarding, nodes: readonly RemoteNode[], req: { name: string; version: string }, call: IncomingCall) {
  const serving = req.name === '' ? f.upNodes() : nodes.filter((n) => n.serves(req.name));
  if (req.name !== '' && serving.length === 0) f.pick(req.name, new Set()); // its NOT_FOUND or UNAVAILABLE
  const answers = await f.everyNode('ModelStatistics', req, call, serving);
  const ok = answers.filter((a): a is PromiseFulfilledResult<Record<string, unknown>> => a.status === 'fulfilled');
  if (ok.length === 0 && answers.length > 0) throw (answers[0] as PromiseRejectedResult).reason;
  return { model_stats: mergeStatistics(ok.flatMap((a) => a.value.model_stats as Record<string, unknown>[])) };
}

/**
 * A stream's request that failed, answered on the stream: its error, with its model and id echoed where they can be
 * read.
 */
function streamFailure(definition: grpc.ServiceDefinition, request: Buffer, details: string): Buffer {
  let model = '';
  let id = '';
  try {
    [model, id] = stringFields(request, 'ModelStreamInfer', 1, 3);
  } catch {
    // not protobuf: the error says so, with no id to echo
  }
  return definition.ModelStreamInfer.responseSerialize({ error_message: details, infer_response: { id, model_name: model } });
}

export function proxyService(ctx: ProxyContext): Record<string, grpc.UntypedHandleCall> {
  const { edge, nodes, definition, logger } = ctx;
  const f = new Forwarding(ctx);
  const forwarded = (rpc: string) => (request: Buffer, call: IncomingCall) => f.forward(rpc, request, call);
  const table: Record<string, grpc.UntypedHandleCall> = {
    ServerLive: edge.unary('ServerLive', () => ({ live: true })),
    ServerReady: edge.unary('ServerReady', () => ({ ready: f.upNodes().length > 0 })),
    ServerMetadata: edge.unary('ServerMetadata', () => ({ name: `${SERVER_NAME}-gateway`, version: ctx.version, extensions: [...GATEWAY_EXTENSIONS] })),
    LogSettings: edge.unary('LogSettings', (req: { settings: Parameters<typeof applyLogSettings>[1] }) =>
      ({ settings: Object.keys(req.settings).length ? applyLogSettings(logger, req.settings) : currentLogSettings(logger) })),
    RepositoryIndex: edge.unary('RepositoryIndex', async (req: unknown, call) => mergedIndex(await f.everyNode('RepositoryIndex', req, call))),
    ModelStatistics: edge.unary('ModelStatistics', (req: { name: string; version: string }, call) => summedStatistics(f, nodes, req, call)),
    ModelInfer: edge.inference('ModelInfer', forwarded('ModelInfer')),
    ModelReady: edge.unary('ModelReady', forwarded('ModelReady')),
    ModelMetadata: edge.unary('ModelMetadata', forwarded('ModelMetadata')),
    ModelConfig: edge.unary('ModelConfig', forwarded('ModelConfig')),
    ModelStreamInfer: edge.stream<Buffer, Buffer>('ModelStreamInfer', {
      // The node's ModelInferResponse bytes become field 2 (infer_response) of the stream's response.
      answer: async (request, call) => {
        const bytes = new WireWriter().bytes(2, await f.forward('ModelInfer', request, call, 'ModelStreamInfer')).finish();
        return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      },
      failed: (request, details) => streamFailure(definition, request, details),
    }),
  };
  for (const rpc of ['RepositoryModelLoad', 'RepositoryModelUnload']) {
    table[rpc] = edge.unary(rpc, async (req: unknown, call) => {
      const answers = await f.everyNode(rpc, req, call);
      const ok = answers.find((a) => a.status === 'fulfilled');
      if (ok) return {};
      const failed = answers.find((a): a is PromiseRejectedResult => a.status === 'rejected');
      throw failed ? failed.reason : new StowageError('STOWAGE_DEVICE_UNAVAILABLE', 'no node is up');
    });
  }
  for (const rpc of ['SystemSharedMemoryStatus', 'SystemSharedMemoryRegister', 'SystemSharedMemoryUnregister', 'CudaSharedMemoryStatus', 'CudaSharedMemoryRegister', 'CudaSharedMemoryUnregister']) {
    table[rpc] = edge.unary(rpc, () => {
      throw errors.unsupported(`${rpc}: shared memory is local to one machine; this is a gateway in front of remote nodes, so register regions with the node that serves your model`);
    });
  }
  return table;
}
