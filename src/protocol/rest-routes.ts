/**
 * The node's KServe V2 REST API with Triton's extensions (what tritonclient.http, KServe's REST
 * client and KServe's model agent call): each route calls the very operation its gRPC twin calls
 * (operations.ts; inferences through the same request path, an `Infer`), and words the answer as
 * Triton's HTTP endpoint does (arrays where Triton answers arrays; the operations' plain values,
 * int64s as numbers, written as they are, with no list of which keys are numbers). The
 * HTTP edge (http-edge.ts) owns limits, admission and errors. On the main thread or an edge
 * thread alike.
 */
import { refusedLater, type Infer } from '../shared/data-plane.js';
import type { LogSettingValue, Operations } from '../shared/operations.js';
import { jsonBody, type RestReply, type RestRoute } from './http-edge.js';
import { jsonParameters, parseRestInfer, restInferResponse } from './rest-tensors.js';
import { errors } from '../shared/errors.js';

/** `/v2/models/{name}` with an optional `/versions/{v}`: captures name and version. */
const MODEL = '/v2/models/([^/]+)(?:/versions/([^/]+))?';
const route = (method: 'GET' | 'POST', pattern: string, handle: RestRoute['handle'], inference = false): RestRoute =>
  ({ method, pattern: new RegExp(`^${pattern}$`), handle, inference });

/** How a JSON value is shown in an error: short, whatever it is. */
function shown(value: unknown): string {
  const text = value === undefined ? 'nothing' : JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 60)}...` : text;
}

/**
 * Field `key` of a JSON body, checked to be a whole number from 0 (an offset, a size, a device):
 * 400 naming the field and what it got otherwise. Absent: `fallback`, when the field may be left out.
 */
function wholeNumber(body: Record<string, unknown>, key: string, what: string, fallback?: number): number {
  const value = body[key];
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw errors.invalidRequest(`${what}: "${key}" must be a whole number from 0, not ${shown(value)}`);
  }
  return value;
}

/**
 * A log setting from JSON: a boolean, a whole number from 0 or a string (which setting takes which is
 * log-settings.ts's).
 */
function settingValue(key: string, v: unknown): LogSettingValue {
  if (typeof v === 'boolean' || typeof v === 'string' || (typeof v === 'number' && Number.isInteger(v) && v >= 0)) return v;
  throw errors.invalidRequest(`log setting ${JSON.stringify(key)} must be a boolean, a whole number or a string`);
}

/**
 * POST /v2/models/{name}/infer: the body decoded into the data plane's request (rest-tensors.ts),
 * handed to the path, and its answer written as JSON and binary pieces.
 */
function inferRoute(infer: Infer, tenantKey: string): RestRoute {
  const ref = (p: string[]) => ({ name: p[0], version: p[1] ?? '' });
  return route('POST', `${MODEL}/infer`, async (r): Promise<RestReply> => {
    // Checked by the edge (a whole number, within endpoints.max_json_body_bytes).
    const header = r.headers['inference-header-content-length'];
    const headerBytes = header === undefined ? undefined : Number(header);
    const { name, version } = ref(r.params);
    // A fault in its tensors is answered once the model is found: an unknown model is 404 whatever it carries.
    const rest = await parseRestInfer(r.body, headerBytes, name, version)
      .catch((err: unknown) => ({ request: refusedLater({ model: name, version, id: '' }, err), allBinary: false, asked: new Map() }));
    const traceparent = r.headers.traceparent;
    const tracestate = r.headers.tracestate;
    const trace = typeof traceparent === 'string' ? { traceparent, ...(typeof tracestate === 'string' ? { tracestate } : {}) } : undefined;
    // No output layout: each output comes back in a buffer of its own, written to the socket as it is.
    const tenant = r.headers[tenantKey];
    const answer = await infer(rest.request, {
      callDeadlineMs: Infinity, signal: r.signal, outputs: null, trace, protocol: 'http', ...(r.admitted ? { admitted: r.admitted } : {}), ...(typeof tenant === 'string' ? { tenant } : {}),
    });
    const { body, headerBytes: jsonBytes } = await restInferResponse(rest, answer);
    return jsonBytes === undefined
      ? { body, headers: { 'content-type': 'application/json' } }
      : { body, headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(jsonBytes) } };
  }, true);
}

/** `tenantKey`: the header that names a request's tenant (endpoints.tenant_key). */
export function restRoutes(ops: Operations, infer: Infer, tenantKey: string): RestRoute[] {
  const ref = (p: string[]) => ({ name: p[0], version: p[1] ?? '' });
  // Readiness as Triton's HTTP endpoint answers it: 200 when ready, 400 when not (KServe V2: "a 4xx
  // status code indicates false"), for the server and for a model (a model unknown is not ready).
  const ok = (ready: boolean, why?: string): RestReply => ({ json: ready ? { ready } : { ready, error: why ?? 'not ready' }, status: ready ? 200 : 400 });
  const modelReady = async (p: string[]): Promise<RestReply> => {
    const { name, version } = ref(p);
    try {
      return (await ops.ModelReady({ name, version })).ready ? ok(true) : ok(false, `model ${JSON.stringify(name)} is not ready`);
    } catch (err) {
      return ok(false, (err as Error).message);
    }
  };
  return [
    route('GET', '/v2/health/live', async () => ({ json: { live: (await ops.ServerLive()).live } })),
    route('GET', '/v2/health/ready', async () => ok((await ops.ServerReady()).ready, 'the server is not ready (starting, or shutting down)')),
    route('GET', '/v2', async () => ({ json: await ops.ServerMetadata() })),
    route('GET', '/v2/models/stats', async () => ({ json: await ops.ModelStatistics({ name: '', version: '' }) })),
    route('GET', `${MODEL}/stats`, async (r) => ({ json: await ops.ModelStatistics(ref(r.params)) })),
    route('GET', `${MODEL}/ready`, (r) => modelReady(r.params)),
    route('GET', `${MODEL}/config`, async (r) => ({ json: (await ops.ModelConfig(ref(r.params))).config })),
    route('GET', MODEL, async (r) => ({ json: await ops.ModelMetadata(ref(r.params)) })),
    inferRoute(infer, tenantKey),
    route('POST', '/v2/repository/index', async (r) => {
      const { ready } = await jsonBody(r.body);
      if (ready !== undefined && typeof ready !== 'boolean') throw errors.invalidRequest(`repository index: "ready" must be true or false, not ${shown(ready)}`);
      return { json: (await ops.RepositoryIndex({ repository_name: '', ready: ready === true })).models };
    }),
    route('POST', '/v2/repository/models/([^/]+)/load', async (r) => {
      const { parameters } = await jsonBody(r.body);
      await ops.RepositoryModelLoad({ model_name: r.params[0], parameters: jsonParameters(parameters, 'the load request') });
      return { json: {} };
    }),
    route('POST', '/v2/repository/models/([^/]+)/unload', async (r) => {
      await ops.RepositoryModelUnload({ model_name: r.params[0] });
      return { json: {} };
    }),
    route('GET', '/v2/systemsharedmemory(?:/region/([^/]+))?/status', async (r) =>
      ({ json: (Object.values((await ops.SystemSharedMemoryStatus({ name: r.params[0] ?? '' })).regions)) })),
    route('POST', '/v2/systemsharedmemory/region/([^/]+)/register', async (r) => {
      const body = await jsonBody(r.body);
      if (typeof body.key !== 'string') throw errors.invalidRequest(`register: "key" must be the shared-memory object's name (a string), not ${shown(body.key)}`);
      const offset = wholeNumber(body, 'offset', 'register', 0);
      const byteSize = wholeNumber(body, 'byte_size', 'register');
      await ops.SystemSharedMemoryRegister({ name: r.params[0], key: body.key, offset, byte_size: byteSize });
      return { json: {} };
    }),
    route('POST', '/v2/systemsharedmemory(?:/region/([^/]+))?/unregister', async (r) => {
      await ops.SystemSharedMemoryUnregister({ name: r.params[0] ?? '' });
      return { json: {} };
    }),
    // CUDA shared memory, as on the gRPC side (backend cuda; on backend cpu nothing can be
    // registered, and registering says why). The handle comes base64-encoded, as Triton takes it:
    // {"raw_handle": {"b64": "..."}, "device_id": 0, "byte_size": N}.
    route('GET', '/v2/cudasharedmemory(?:/region/([^/]+))?/status', async (r) =>
      ({ json: (Object.values((await ops.CudaSharedMemoryStatus({ name: r.params[0] ?? '' })).regions)) })),
    route('POST', '/v2/cudasharedmemory(?:/region/([^/]+))?/unregister', async (r) => ({ json: await ops.CudaSharedMemoryUnregister({ name: r.params[0] ?? '' }) })),
    route('POST', '/v2/cudasharedmemory/region/([^/]+)/register', async (r) => {
      const body = await jsonBody(r.body);
      const rawHandle = body.raw_handle;
      const b64 = rawHandle && typeof rawHandle === 'object' ? (rawHandle as { b64?: unknown }).b64 : undefined;
      if (typeof b64 !== 'string') throw errors.invalidRequest(`register: "raw_handle" must be {"b64": the CUDA IPC handle, base64-encoded}, not ${shown(rawHandle)}`);
      const deviceId = wholeNumber(body, 'device_id', 'register');
      const byteSize = wholeNumber(body, 'byte_size', 'register');
      return { json: await ops.CudaSharedMemoryRegister({ name: r.params[0], raw_handle: Buffer.from(b64, 'base64'), device_id: deviceId, byte_size: byteSize }) };
    }),
    route('GET', '/v2/logging', async () => ({ json: (await ops.LogSettings({ settings: {} })).settings })),
    route('POST', '/v2/logging', async (r) => {
      const given = await jsonBody(r.body);
      const settings = Object.fromEntries(Object.entries(given).map(([k, v]) => [k, settingValue(k, v)]));
      return { json: (await ops.LogSettings({ settings })).settings };
    }),
  ];
}
