/**
 * An edge thread: terminates gRPC and REST on the node's ports beside the other edges (each
 * listens with SO_REUSEPORT, so the kernel spreads connections over them; grpc-js takes each
 * accepted socket through its connection injector), decodes every request, admits it against the
 * process's one admission (shared counters), and encodes every answer. What only the main thread
 * may answer goes there over this thread's port (shared/channels/edge.ts): each operation by name
 * (shared/operations.ts). Streams stay on their edge.
 *
 * An inference takes the request path here (shared/request-path.ts on this edge's rooms,
 * actors/rooms/rooms.ts): to a device actor over this thread's own door, through this thread's
 * own hook threads, and back here to be framed; the main thread only reads what it counted. What
 * this edge's rooms do not take (rooms.ts says which) goes to the main thread's rooms as the data
 * plane's request, and its answer comes back here.
 *
 * An uncaught error ends this thread and closes its connections only; the main thread starts a
 * replacement on the same ports (handle.ts).
 */
import { existsSync, renameSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import type { EdgeStart, FromEdge, ToEdge } from '../../shared/channels/edge.js';
import type { DataPlaneRequest, Infer, InferenceAnswer } from '../../shared/data-plane.js';
import { errors, fromErrorData, type ErrorData } from '../../shared/errors.js';
import { createLogger } from '../../shared/log.js';
import { Outbox, PendingCalls } from '../../shared/thread-messages.js';
import { Admission } from '../../shared/admission.js';
import { GrpcEdge } from '../../protocol/edge.js';
import { controlTable, inferenceTable } from '../../protocol/grpc-services.js';
import { HealthService } from '../../protocol/health-service.js';
import { HttpEdge } from '../../protocol/http-edge.js';
import { passEncodedResponses } from '../../protocol/codec.js';
import { markOwnedBuffers } from '../../protocol/proto.js';
import { operationsVia } from '../../shared/operations.js';
import { loadControlClient, loadInferenceClient } from '../../protocol/proto.js';
import { restRoutes } from '../../protocol/rest-routes.js';
import { Rooms } from '../rooms/rooms.js';
import { countExportFailuresIn, startTracing, stopTracing } from '../../shared/tracing.js';

const start = workerData as EdgeStart;
const port = parentPort!;
const { endpoints } = start;
const logger = createLogger(start.logLevel).child({ edge: start.edge });
// The process's one admission, this edge counting its share in a slot of its own (the main thread's is 0).
const admission = new Admission(endpoints.max_concurrent_requests, endpoints.max_inflight_bytes, start.admission, start.edge + 1);

// Everything this turn asks goes to the main thread in one message (shared/thread-messages.ts, Outbox).
const outbox = new Outbox<FromEdge>((messages, transfer) => port.postMessage(messages, transfer));
const post = (msg: FromEdge, transfer: ArrayBuffer[] = []) => outbox.push(msg, transfer);


/**
 * Calls and inferences waiting for the main thread, by id. No timer of their own: the main thread
 * answers every one (an inference by its deadline there), and its going ends this thread too.
 */
const pending = new PendingCalls();
let nextId = 1;

function ask<T>(msg: FromEdge & { id: number }, transfer?: ArrayBuffer[]): Promise<T> {
  const answer = pending.wait<T>(msg.id, Infinity, () => new Error('unreachable: a wait without a timeout'));
  post(msg, transfer);
  return answer;
}

/** Every operation, answered by the main thread. */
const ops = operationsVia((call) => ask({ type: 'call', id: nextId++, ...call }));

/**
 * Fault injection, for the test of an edge's crash (test/adversarial/faults.test.js): when the
 * file STOWAGE_FAULT_EDGE_EXIT names exists as an inference arrives, this thread takes it (renames
 * it, so that one edge only takes it) and throws an error nothing catches, which ends it as any
 * such error would, with its connections and the requests on them. Unset (production), it costs nothing.
 */
const faultExitFile = process.env.STOWAGE_FAULT_EDGE_EXIT;
/** Whether this thread took the fault: of edges that see the file at once, the one whose rename succeeds. */
function tookFault(file: string): boolean {
  try {
    renameSync(file, `${file}.taken-by-edge-${start.edge}`);
    return true;
  } catch {
    return false;
  }
}

/**
 * The request's inline bytes, each in a buffer the main thread may own: bytes the request owns go
 * as they are (their buffers transferred once); others (a small gRPC message in Node's shared
 * pool) are copied into a buffer of their own first, the copy the path would make otherwise.
 */
function handedOver(request: DataPlaneRequest): ArrayBuffer[] {
  const transfer = new Set<ArrayBuffer>();
  for (const input of request.inputs) {
    const bytes = input.bytes;
    if (bytes.kind !== 'inline') continue;
    if (!bytes.owned) {
      const own = new Uint8Array(bytes.data.byteLength);
      // copy: a small message's bytes into a buffer of their own (the table's `inlineData` copy, made on the edge)
      own.set(bytes.data);
      input.bytes = { kind: 'inline', data: own, owned: true };
    }
    transfer.add((input.bytes as { data: Uint8Array }).data.buffer as ArrayBuffer);
  }
  return [...transfer];
}

/**
 * The request path in this edge's rooms; what they do not take goes to the main thread's rooms, its answer coming
 * back here.
 */
const infer: Infer = async (request, options) => {
  if (faultExitFile && existsSync(faultExitFile) && tookFault(faultExitFile)) {
    setImmediate(() => {
      throw new Error(`a fault injected by ${faultExitFile}`);
    });
  }
  return path ? path.infer(request, options) : viaMain(request, options);
};

const viaMain: Infer = async (request, { signal, ...options }) => {
  if (signal.aborted) throw errors.cancelled(); // its client went while it was read: not sent on
  const id = nextId++;
  const onAbort = () => post({ type: 'cancel', id });
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    return await ask<InferenceAnswer>({ type: 'infer', id, request, options }, handedOver(request));
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
};

// The request path runs here in this edge's rooms (actors/rooms/rooms.ts), counted here in shared memory; what they
// do not take goes to the main thread.
const path = start.rooms
  ? new Rooms(start.rooms, { row: start.edge, quotaRow: start.edge + 1 }, { elsewhere: viaMain, lastRelease: (of) => post({ type: 'lastRelease', of }), tracing: start.tracing !== null })
  : null;

const healthListeners: (() => void)[] = [];
const health = new HealthService({
  status: async (service) => (await ops.HealthStatus({ service })).status,
  watch: (listener) => healthListeners.push(listener),
});

const early = path?.quotas.earlyRefusal;
const grpcEdge = new GrpcEdge(endpoints, logger, admission, early);
grpcEdge.addService(loadControlClient().service, controlTable(grpcEdge, ops));
// Large ModelInfer messages own their buffer: their tensors go to the main thread, then the device, without a copy.
grpcEdge.addService(passEncodedResponses(markOwnedBuffers(loadInferenceClient().service, ['ModelInfer', 'ModelStreamInfer'])), inferenceTable(grpcEdge, ops, infer));
health.register(grpcEdge);
const httpEdge = new HttpEdge({
  host: endpoints.host, port: start.ports.http, reusePort: true, maxBodyBytes: endpoints.max_receive_message_bytes, maxJsonBytes: endpoints.max_json_body_bytes,
  requestTimeoutMs: endpoints.http_request_timeout_seconds * 1000, admission, logger,
  ...(early ? { tenantGate: { key: endpoints.tenant_key, refusal: early } } : {}),
});
httpEdge.add(restRoutes(ops, infer, endpoints.tenant_key));

/**
 * An error nothing caught ends this thread, as it would end the process, and only this thread:
 * its connections are dropped first (see GrpcEdge.abandon), then the main thread is told why (it
 * starts a replacement, handle.ts) and the thread exits.
 */
process.on('uncaughtException', (err) => {
  logger.error({ err }, 'edge thread failed: dropping its connections');
  grpcEdge.abandon();
  httpEdge.abandon();
  setTimeout(() => process.exit(70), 10);
});

port.on('message', (messages: ToEdge[]) => {
  for (const msg of messages) receive(msg);
});

function receive(msg: ToEdge): void {
  switch (msg.type) {
    case 'reply':
    case 'answer':
    case 'failed': {
      if (msg.type === 'failed') pending.reject(msg.id, fromErrorData(msg.error as ErrorData));
      else pending.resolve(msg.id, msg.type === 'reply' ? msg.reply : msg.answer);
      return;
    }
    case 'health':
      for (const listener of healthListeners) listener();
      return;
    case 'logLevel':
      logger.level = msg.level;
      return;
    case 'route':
      path?.route(msg.model, msg.route);
      return;
    case 'door':
      if (path) path.door(msg.deviceId, msg.port, msg.link, msg.waitBoundMs, msg.backlog);
      else msg.port.close();
      return;
    case 'deviceOut':
      path?.deviceOut(msg.deviceId, msg.why);
      return;
    case 'region':
      path?.region(msg.name, msg.region);
      return;
    case 'slotsGrown':
      path?.slotsGrown(msg.leases, msg.counters);
      return;
    case 'regionSlotsGrown':
      path?.regionSlotsGrown(msg.holds);
      return;
    case 'sync':
      post({ type: 'synced', id: msg.id }); // what came before it in order is applied already
      return;
    case 'drain':
      health.close();
      void Promise.all([grpcEdge.stop(msg.graceMs), httpEdge.stop(msg.graceMs)]).then(() => path?.close()).then(() => stopTracing(logger)).then(() => post({ type: 'drained' }));
      return;
  }
}

// Tracing on: this edge makes its requests' spans and exports them itself, from the environment the main thread set.
if (start.tracing) {
  await startTracing(logger);
  countExportFailuresIn(start.tracing.exportFailures, start.edge + 1);
}
const http = await httpEdge.start();
const grpc = await grpcEdge.start({ port: start.ports.grpc, reusePort: true });
post({ type: 'listening', ports: { grpc, http } });
