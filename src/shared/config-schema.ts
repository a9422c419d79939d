/**
 * The node file's JSON Schema, with each key's default and unit beside it.
 * ajv validates the parsed YAML against it once at start-up (filling in the
 * defaults); the result is frozen and handed to every thread.
 *
 * Keys follow the seeds' node configuration page, adapted to one process with
 * a device actor per device (config/workers.ts resolves `gpus`, `workers` and
 * the `models` pinning map into one configuration per device). A new key goes
 * here, with its default and unit; the TypeScript types at the bottom are
 * derived from the schema (json-schema-to-ts), so they follow on their own.
 */
import type { FromSchema } from 'json-schema-to-ts';
import { MAX_TIMER_SECONDS } from './timers.js';
import { MAX_PRIORITY_LEVELS } from './constants.js';

/**
 * The config's unions, each spelled once: the schema's `enum`s and the types below come from these
 * lists, and the rest of the code imports the types from here.
 */
export const RESIDENCIES = ['device', 'system', 'unpinned'] as const;
export type Residency = (typeof RESIDENCIES)[number];
const DISCIPLINES = ['fair', 'fifo', 'edf'] as const;
export type Discipline = (typeof DISCIPLINES)[number];
const GATEWAY_MODES = ['round_robin', 'least_outstanding', 'lpt_packing', 'pooled'] as const;
export type GatewayMode = (typeof GATEWAY_MODES)[number];
const FILL_POLICIES = ['fill_rr', 'fill_least'] as const;
export type FillPolicy = (typeof FILL_POLICIES)[number];

// One subject's quota (global.quotas: shared/admission.ts); 0 is no limit.
const quotaLimitsSchema = {
  type: 'object',
  additionalProperties: false,
  default: {},
  properties: {
    // Requests in flight at once on this node (from admission to answer); past it, RESOURCE_EXHAUSTED at once.
    max_inflight: { type: 'integer', minimum: 0, default: 0 },
    // Device time per second of wall time (the executions' compute time, each request's share of
    // its batch by rows): 0.5 lets it keep half of one device busy.
    device_seconds_per_second: { type: 'number', minimum: 0, default: 0 },
    // How far ahead of that rate it may run before it is refused, in seconds of wall time.
    burst_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 1 },
  },
} as const;

// The runtime and scheduler blocks: under global, and (without defaults, so that only what a
// worker sets overrides global) under each entry of workers.
const runtimeSchema = {
  type: 'object',
  additionalProperties: false,
  default: {},
  properties: {
    // cpu: ONNX Runtime's CPU provider, each device a virtual one. cuda: one device actor per GPU
    // (gpus:), ONNX Runtime's CUDA provider, the weight arena in GPU memory (npm run cuda:install).
    backend: { enum: ['cpu', 'cuda'], default: 'cpu' },
    // Run each model once per compiled batch size, on zeros, before it reports READY, so that no
    // client pays ONNX Runtime's first run (90-470 ms on CUDA). auto: on for cuda, off for cpu.
    warmup: { enum: ['auto', 'on', 'off'], default: 'auto' },
    // Backend cuda: the CUDA provider's settings (config/cuda-options.ts maps them to ONNX Runtime's).
    cuda: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        // TF32 tensor cores for float32 matrix products and convolutions: ONNX Runtime's default and
        // Triton's, 1.5-1.85x faster on ResNet-50 (H100); answers differ from full float32 by about
        // 6e-4 relative. false: full float32.
        tf32: { type: 'boolean', default: true },
        // cuDNN's convolution algorithm choice: exhaustive (times every algorithm on the first run of
        // each shape: fastest after, slowest first run; warm-up pays it), heuristic, or default.
        cudnn_conv_algo_search: { enum: ['exhaustive', 'heuristic', 'default'], default: 'exhaustive' },
        // Bytes ONNX Runtime's own arena (activations, cuDNN workspace) may take per GPU and session
        // group; 0: no limit beyond what the weight arena leaves free.
        ort_arena_limit_bytes: { type: 'integer', minimum: 0, default: 0 },
        // The weight arena's size in bytes on each GPU, instead of the fractions of its free memory
        // (mem_fraction x weight_cache_fraction x (1 - weight_cache_wiggle_fraction)); 0: from those.
        weight_cache_bytes: { type: 'integer', minimum: 0, default: 0 },
        // CUDA graphs: each model's warm runs replay one captured graph per compiled batch size
        // (inputs and outputs through fixed GPU buffers), where the model allows it; a model that
        // does not runs as before and its status says why; a model whose weights move more than
        // twice (evicted, compacted) goes on without. A warm ResNet-50 run took 0.42-0.79x the raw
        // run's time with them, 0.72-0.82x without, and no first call paid 100+ ms (H100, H200:
        // docs/gpu.md). The whole GPU suite passed with it on (H200, 2026-11-30), yet off by default:
        // on, each model has sessions of its own (share_sessions does not apply: a graph is its
        // session's), ~1 GiB of the GPU for a ResNet-50 beside its weights, where 150 sharing theirs
        // took 22 GiB with their 14.3 GiB of weights.
        graphs: { type: 'boolean', default: false },
        // One ONNX Runtime arena per GPU for every model's activations, instead of one per model's
        // session: each session's own arena keeps the most its runs ever took (911 MiB for a warmed
        // ResNet-50 on an H200), which is what limits models per GPU once their weights are in the
        // weight cache; shared, they need what the largest run takes, once. Not with CUDA graphs (a
        // graph replays into the addresses it captured, which a shared arena may hand to another
        // session): a model opened for graphs keeps an arena of its own. Off by default until compared
        // on a GPU (the 150-model catalog ran with it on, 2026-11-30: docs/gpu.md).
        shared_arena: { type: 'boolean', default: false },
      },
    },
    // ONNX Runtime intra-op threads per device actor; 0: one per core on backend cpu, one on
    // backend cuda (config/cuda-options.ts: the CUDA provider's runs do little on the CPU, and a
    // pool per core made a warm ResNet-50 run 0.7 ms slower at batch 1 on a 16-core H200 host).
    intra_op_threads: { type: 'integer', minimum: 0, default: 0 },
    // Runs whose learned cost is below this many ms run on the device thread itself; longer ones
    // (and a model's first) on a libuv thread, the device thread admitting and coalescing meanwhile.
    // 0: every run on a libuv thread. Backend cuda ignores it: every run is on the device thread
    // (the CUDA provider keeps GPU memory per thread that runs a session). Where cores are few, a device thread awake
    // beside a run's own threads slows the run more than it gains (docs/performance.md).
    inline_run_below_ms: { type: 'number', minimum: 0, default: 50 },
    // ONNX Runtime's intra-op threads: a pool per session (intra_op_threads each: idle ones sleep,
    // but a node with hundreds of models holds thousands of them), or one pool for the whole
    // process (intra_op_threads threads, every session of every device sharing them). One process
    // has one setting: a worker may not differ from global.
    thread_pool: { enum: ['per_session', 'process'], default: 'per_session' },
    // Models and versions whose compiled weightless graphs are equal (and that open with equal
    // options: tf32, CUDA graphs) share one ONNX Runtime session per device, each with its own
    // binding of its weights: a loaded model costs its weights and little else
    // (docs/weight-cache.md, Sessions). false: a session per model's ONNX file.
    share_sessions: { type: 'boolean', default: true },
    // Backend cpu: every session takes its activations from one ONNX Runtime arena for the process
    // (registered with its environment; memory patterns off), which keeps what the largest runs at
    // once took, instead of an arena per session keeping the most its own runs ever took (ResNet-50
    // after batch 32: ~270 MB per session). Backend cuda: see cuda.shared_arena.
    share_activations: { type: 'boolean', default: true },
    // Bytes the open sessions of a device may hold beside weights and shared activations (measured
    // as each opens): beyond it the least recently used idle session closes, and opens again from
    // the compile cache on its model's next call (the model stays READY; residency: device models
    // keep theirs). 0: no budget, every loaded model's session stays open.
    session_budget_bytes: { type: 'integer', minimum: 0, default: 0 },
    // A model with a dynamic batch axis gets a session per compiled batch size, and each run is
    // padded to the smallest size its rows fit, instead of one session run at every row count.
    // With cuDNN 9 ONNX Runtime's CUDA Conv keeps one plan per node, for the last input shape,
    // and builds it again whenever the shape changes: 50-140 ms a change for a small convnet and
    // ResNet-50 on an H200 (2026-11-28), so alternating batch sizes on one session made every
    // first call after warm-up cold and a coalescing catalog run at 18 requests/s. auto: on for
    // backend cuda, off for cpu (whose kernels keep no per-shape plan, where padding only costs).
    session_per_batch_size: { anyOf: [{ const: 'auto' }, { type: 'boolean' }], default: 'auto' },
    // Bytes of memory each device has (backend cpu: memory the device actor allocates for itself,
    // so a small device can be modelled; backend cuda: ignored, the GPU's free memory at start
    // counts). The memory pool is mem_fraction of it.
    cpu_device_memory_bytes: { type: 'integer', minimum: 0, default: 1073741824 },
    // Fraction of the device's memory claimed as the pool.
    mem_fraction: { type: 'number', exclusiveMinimum: 0, maximum: 1, default: 0.9 },
    // Claim the weight arena up front (cpu: touch every page at start-up, so loads never fault).
    preallocate: { type: 'boolean', default: true },
    // Fraction of the pool for weights (the arena). 0 turns the on-demand cache off: every
    // model's weights stay embedded in its sessions and every model is resident.
    weight_cache_fraction: { type: 'number', minimum: 0, maximum: 1, default: 1 },
    // Fraction of the arena kept free (room for activations and fragmentation).
    weight_cache_wiggle_fraction: { type: 'number', minimum: 0, exclusiveMaximum: 1, default: 0.1 },
    // Copy the weights of cold models queued behind other work onto the device while it runs that
    // work (a GPU: on a stream of their own; cpu: while a run goes on one of libuv's threads), so
    // that they are there by their turn. false: a cold model's batch waits for its copy at its turn.
    // auto: on for backend cuda, off for cpu, where the copy competes with the run for the same
    // cores and measured no gain (bench/uploads-beside.js, docs/weight-cache.md).
    upload_beside_execution: { anyOf: [{ const: 'auto' }, { type: 'boolean' }], default: 'auto' },
  },
} as const;

const schedulerSchema = {
  type: 'object',
  additionalProperties: false,
  default: {},
  properties: {
    // fair: weighted share of device time by learned cost; fifo: oldest request first;
    // edf: earliest deadline first, shedding what cannot finish in time.
    discipline: { enum: DISCIPLINES, default: 'fair' },
    // fair with the weight cache: a model whose weights are on the device may go before a less-charged
    // one whose weights are not, by at most that one's last cold load and one execution of device
    // time (docs/serving.md, Scheduling). false: strictly least-charged first, a cold load at every turn when the
    // queued models do not all fit.
    prefer_resident: { type: 'boolean', default: true },
    // Half-life, in seconds, of the moving average that learns each model's execution cost.
    ema_halflife_seconds: { type: 'number', exclusiveMinimum: 0, default: 30 },
    // Requests queued per model per device; past it, RESOURCE_EXHAUSTED.
    max_queue_depth: { type: 'integer', minimum: 1, default: 1024 },
    // Priority levels a request may name (Triton's `priority` parameter), 1 the highest; waiting work
    // of a higher level goes first, within a model and across models. A priority above this is
    // refused (INVALID_ARGUMENT); 0 or none means the model's default level.
    priority_levels: { type: 'integer', minimum: 1, maximum: MAX_PRIORITY_LEVELS, default: 3 },
    // The level of a request that names none, unless its model's `priority` says otherwise: the
    // middle of the default three, so clients can ask for more or for less without configuration.
    default_priority: { type: 'integer', minimum: 1, maximum: MAX_PRIORITY_LEVELS, default: 2 },
    // Least share of recent device time (a 5 s half-life) the levels below the highest waiting one
    // get while they have work waiting, so that they are never starved; 0: strict priority.
    lower_priority_share: { type: 'number', minimum: 0, maximum: 1, default: 0.1 },
    // Seconds a request may wait in the queue before DEADLINE_EXCEEDED.
    dispatch_timeout_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 30 },
    // Compact the device's weight arena after every N on-demand weight loads; 0 never (the arena
    // also compacts when a load finds enough free bytes but no hole large enough).
    compaction_interval: { type: 'integer', minimum: 0, default: 0 },
    // Per-model overrides, by model name.
    models: {
      type: 'object',
      default: {},
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        properties: {
          // Relative share of device time under `fair` (default 1).
          weight: { type: 'number', exclusiveMinimum: 0, default: 1 },
          // Priority level of this model's requests that name none (default: scheduler.default_priority).
          priority: { type: 'integer', minimum: 1, maximum: MAX_PRIORITY_LEVELS },
          // Most rows coalesced into one execution (default: the largest compiled batch size).
          max_batch_size: { type: 'integer', minimum: 1 },
          // Where the weights live at rest: device (loaded at start-up, never evicted), system
          // (host RAM, onto the device on demand; the default), unpinned (re-read from cache_dir on each load).
          residency: { enum: RESIDENCIES },
          // Warm up before READY (runtime.warmup), for this model.
          warmup: { type: 'boolean' },
          // Backend cuda: TF32 for this model (runtime.cuda.tf32 otherwise), e.g. off for a model
          // whose answers must match full float32.
          tf32: { type: 'boolean' },
        },
      },
    },
  },
} as const;

/** A remote node's address: host:port. */
const hostPort = { type: 'string', pattern: '^[^\\s:]+:\\d+$' } as const;

/** How many devices a model is placed on under lpt_packing: a count, or all of them. */
const replicaCount = { anyOf: [{ type: 'integer', minimum: 1 }, { const: 'all' }] } as const;

/** A copy of a schema without its defaults: ajv fills defaults in, and an override block must not. */
type WithoutDefaults<T> = T extends readonly unknown[] ? { readonly [K in keyof T]: WithoutDefaults<T[K]> }
  : T extends object ? { readonly [K in keyof T as K extends 'default' ? never : K]: WithoutDefaults<T[K]> } : T;
function withoutDefaults<T>(schema: T): WithoutDefaults<T> {
  if (Array.isArray(schema)) return schema.map(withoutDefaults) as WithoutDefaults<T>;
  if (schema === null || typeof schema !== 'object') return schema as WithoutDefaults<T>;
  return Object.fromEntries(Object.entries(schema).filter(([k]) => k !== 'default').map(([k, v]) => [k, withoutDefaults(v)])) as WithoutDefaults<T>;
}

export const nodeConfigSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    // Directory of bundles: each immediate subdirectory with a manifest.yaml is a model.
    // A relative path is resolved against the directory of the node file. Required, except for a
    // gateway-only process (gateway.endpoints).
    model_repo: { type: 'string', minLength: 1 },
    // Where compiled models (ONNX Runtime's optimised graph, weights split off) are kept across
    // restarts. Empty: $XDG_CACHE_HOME/stowage, else ~/.cache/stowage. Relative: to the node file.
    cache_dir: { type: 'string', default: '' },
    // Devices: auto (every GPU; one on backend cpu), a count, or a list of device ids. On backend
    // cpu, N gives N virtual devices, each a device actor with its own ONNX Runtime threads. A GPU
    // listed twice ([0, 0]) gets two device actors, which split its free memory; the actors are then
    // numbered by position (devices 0 and 1) rather than by GPU.
    gpus: { anyOf: [{ const: 'auto' }, { type: 'integer', minimum: 1 }, { type: 'array', minItems: 1, items: { type: 'integer', minimum: 0 } }], default: 'auto' },
    gateway: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        // Remote Stowage nodes (host:port of their gRPC ports). Non-empty: this process is a
        // gateway only; it serves no devices and forwards every request to these nodes.
        endpoints: { type: 'array', uniqueItems: true, items: hostPort, default: [] },
        // Their admin ports (host:port), whose /metrics the gateway's /metrics includes, labelled node.
        metrics_endpoints: { type: 'array', uniqueItems: true, items: hostPort, default: [] },
        // Nodes found by DNS (beside endpoints): a name resolved every interval_seconds to all its
        // addresses (a Kubernetes headless Service answers one per ready pod). A set name makes this
        // process a gateway only; nodes that appear are added, nodes that disappear drained and dropped.
        discovery: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            // The name to resolve; empty: no discovery.
            dns_name: { type: 'string', default: '' },
            // The discovered nodes' gRPC port.
            port: { type: 'integer', minimum: 1, maximum: 65535, default: 8001 },
            // Their admin port, whose /metrics the gateway's includes; 0: not scraped.
            metrics_port: { type: 'integer', minimum: 0, maximum: 65535, default: 0 },
            // Seconds between resolutions.
            interval_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 5 },
            // A DNS server (host:port) to ask instead of the system's resolvers; empty: the system's.
            resolver: { type: 'string', pattern: '^$|^[^\\s:]+:\\d+$', default: '' },
          },
        },
        // Forwarded RPCs (unary calls and open streams) in flight to one node; more wait their turn.
        max_concurrent_streams: { type: 'integer', minimum: 1, default: 32 },
        // Deadline, in seconds, of a forwarded call whose client set none.
        request_timeout_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 60 },
        // Seconds between health checks of every node (RepositoryIndex; pooled: ServerReady, and the index
        // when it changed); down nodes come back when they answer.
        health_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 2 },
        scheduling: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            // Which device serves a request: round_robin, least_outstanding, or lpt_packing (each model
            // placed on `replicas` devices by measured compute and weight bytes; devices must run fifo or edf).
            // A gateway-only process: which node: round_robin, least_outstanding, or pooled (each model
            // placed on a few nodes by rendezvous hashing with bounded loads, so the fleet's memory is
            // pooled: routing/fleet-placement.ts, remote/fleet-routes.ts).
            mode: { enum: GATEWAY_MODES, default: 'round_robin' },
            // pooled: the bounds of placement across nodes (routing/fleet-placement.ts's FleetOptions).
            pooled: {
              type: 'object',
              additionalProperties: false,
              default: {},
              properties: {
                // No node takes more than (1 + epsilon) of its fair share of the load or the heavy models' bytes.
                epsilon: { type: 'number', exclusiveMinimum: 0, maximum: 10, default: 0.1 },
                // A node holding a model's weights keeps it up to (1 + epsilon + stickiness) of its share.
                stickiness: { type: 'number', minimum: 0, maximum: 10, default: 0.15 },
                // A replica per this much of one device's compute a model needs (device-seconds per second).
                replica_load: { type: 'number', exclusiveMinimum: 0, maximum: 1000, default: 0.5 },
                // While a node's status reads fail or time out it keeps serving, and placement goes on
                // with its last report for this long; then its loads no longer count, but it stays placed.
                report_max_age_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 10 },
                // A model that moved stays where it went this long (but for a node of it gone or one
                // joining, or its node past 1 + epsilon + 3 stickiness of its share); 0: no minimum.
                min_move_age_seconds: { type: 'number', minimum: 0, maximum: MAX_TIMER_SECONDS, default: 30 },
              },
            },
            // lpt_packing: devices per model, a count or all.
            default_replicas: { ...replicaCount, default: 1 },
            // lpt_packing: a replica takes this many full batches in flight before the next opens.
            routing_fill_factor: { type: 'number', exclusiveMinimum: 0, default: 1 },
            // lpt_packing: which replica opens next: fill_rr in turn, fill_least the least busy device.
            routing_policy: { enum: FILL_POLICIES, default: 'fill_rr' },
            // lpt_packing: repack after this many device-seconds of work; 0 packs only at start-up.
            rebalance_compute_seconds: { type: 'number', minimum: 0, default: 30 },
            // lpt_packing: per-model replica counts.
            models: {
              type: 'object',
              default: {},
              additionalProperties: {
                type: 'object',
                additionalProperties: false,
                properties: { replicas: replicaCount },
              },
            },
          },
        },
      },
    },
    // One entry per device actor; when present it wins over gpus. name is the worker's identity (the
    // models: map names it); gpu the device it drives (default: its index; two workers may drive
    // one GPU, as gpus: [0, 0] does); runtime and scheduler blocks override global's for it only.
    workers: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['name'],
        properties: {
          name: { type: 'string', minLength: 1 },
          gpu: { type: 'integer', minimum: 0 },
          runtime: withoutDefaults(runtimeSchema),
          scheduler: withoutDefaults(schedulerSchema),
        },
      },
    },
    // Models pinned to device memory on the listed workers (residency: device there); without
    // workers:, the devices of gpus: are named worker0, worker1, ...
    models: {
      type: 'object',
      default: {},
      additionalProperties: { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'string', minLength: 1 } },
    },
    // The node's stable name, what a pooled gateway places models by (empty: the pod's name in
    // Kubernetes, else host:grpc-port; node/node-name.ts).
    node_name: { type: 'string', default: '' },
    // Serve only these models of the repository (empty: all). Environment: colon-separated.
    models_include: { type: 'array', items: { type: 'string', minLength: 1 }, uniqueItems: true, default: [] },
    global: {
      type: 'object',
      additionalProperties: false,
      default: {},
      properties: {
        // dynamic: watch the repository and load, reload, unload bundles as they change;
        // static: the start-up set is fixed; explicit: nothing loads until RepositoryModelLoad asks.
        model_control_mode: { enum: ['dynamic', 'static', 'explicit'], default: 'dynamic' },
        // Seconds between looks at the repository in dynamic mode, beside file events.
        model_poll_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 15 },
        logging: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            level: { enum: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], default: 'info' },
          },
        },
        // OpenTelemetry tracing (shared/tracing.ts). The standard OTEL_* environment variables win
        // over these; these fill in what the environment leaves unset.
        tracing: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            // none (off) or otlp (OTEL_TRACES_EXPORTER).
            exporter: { enum: ['none', 'otlp'], default: 'none' },
            // The OTLP/HTTP receiver's base URL, e.g. http://collector:4318 (OTEL_EXPORTER_OTLP_ENDPOINT); empty: the
            // SDK's default.
            endpoint: { type: 'string', default: '' },
            // http/protobuf or http/json (OTEL_EXPORTER_OTLP_PROTOCOL).
            protocol: { enum: ['http/protobuf', 'http/json'], default: 'http/protobuf' },
            // Fraction of the traces started here that are kept (parentbased_traceidratio; a caller's sampled flag
            // wins).
            sample_ratio: { type: 'number', minimum: 0, maximum: 1, default: 1 },
          },
        },
        runtime: runtimeSchema,
        scheduler: schedulerSchema,
        // Per tenant and per model limits on this node (shared/admission.ts). A request's tenant is its
        // endpoints.tenant_key metadata or header: absent, `default`; a name not listed here, `other`
        // (all of them together; list `other` to limit them).
        quotas: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            tenants: { type: 'object', default: {}, additionalProperties: quotaLimitsSchema },
            models: { type: 'object', default: {}, additionalProperties: quotaLimitsSchema },
          },
        },
        hooks: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            // Threads running bundles' model.js hooks; 0 = half the cores, at least two.
            threads: { type: 'integer', minimum: 0, default: 0 },
            // Seconds one hook call may run, from when a hook thread begins it (its wait for a thread does not
            // count); past it DEADLINE_EXCEEDED and its thread is replaced.
            timeout_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 10 },
            // Seconds importing one model.js may take (its top-level code); past it the bundle is
            // refused and the thread replaced, and the repository goes on loading the others.
            import_timeout_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 30 },
            // JS heap limit of each hook thread in MiB; a hook past it fails its call and its thread
            // is replaced, instead of the process running out of memory. 0 = Node's default.
            max_heap_mib: { type: 'integer', minimum: 0, default: 1024 },
          },
        },
        endpoints: {
          type: 'object',
          additionalProperties: false,
          default: {},
          properties: {
            // Interface to bind. 127.0.0.1 keeps the server local; 0.0.0.0 serves the network.
            host: { type: 'string', minLength: 1, default: '127.0.0.1' },
            // KServe V2 gRPC port; 0 picks a free port (logged at start-up).
            grpc_port: { type: 'integer', minimum: 0, maximum: 65535, default: 8001 },
            // KServe V2 REST port (with Triton's extensions: binary tensors, repository, statistics,
            // shared memory, logging), as Triton's; 0 picks a free port (logged at start-up).
            http_port: { type: 'integer', minimum: 0, maximum: 65535, default: 8000 },
            // Admin HTTP port (/healthz, /readyz, /metrics); 0 picks a free port.
            admin_port: { type: 'integer', minimum: 0, maximum: 65535, default: 8002 },
            // Bytes of tensors that the inference requests in flight may hold (their input contents
            // as received); a request past it is refused RESOURCE_EXHAUSTED at once, naming the
            // bytes. A lone request is always admitted. 0 = uncapped. The memory guard: a burst of
            // small requests queues, one of huge ones is shed.
            max_inflight_bytes: { type: 'integer', minimum: 0, default: 1073741824 },
            // In-flight inference RPCs (ModelInfer calls and open ModelStreamInfer streams); past it,
            // RESOURCE_EXHAUSTED at once. 0 = uncapped (the default: bytes and each model's queue
            // depth are the guards, so a client's burst of a thousand requests is answered).
            max_concurrent_requests: { type: 'integer', minimum: 0, default: 0 },
            // gRPC message limits in bytes; Triton's clients use 2^31-1, so large tensors pass.
            max_receive_message_bytes: { type: 'integer', minimum: 1024, maximum: 2147483647, default: 2147483647 },
            max_send_message_bytes: { type: 'integer', minimum: 1024, maximum: 2147483647, default: 2147483647 },
            // REST: bytes of JSON a body may hold (a route's body, an inference's JSON header), as
            // Triton's --http-max-input-size (64 MiB); binary tensor bytes after an inference's JSON
            // header keep max_receive_message_bytes. Applied to the inflated bytes of a compressed body.
            max_json_body_bytes: { type: 'integer', minimum: 1024, maximum: 2147483647, default: 67108864 },
            // REST: seconds a whole request (headers and body) may take to arrive; a slower one is
            // answered 408 and its connection closed. Headers alone get 10 s.
            http_request_timeout_seconds: { type: 'number', exclusiveMinimum: 0, maximum: MAX_TIMER_SECONDS, default: 60 },
            // HTTP/2 receive window in bytes, per stream and per connection, of every gRPC connection:
            // how much of a request a client may send before the server acknowledges it. HTTP/2's
            // 64 KiB (65535) throttles large tensors about 3× on loopback; 4 MiB lets a 600 KiB
            // request arrive in one round trip.
            http2_window_bytes: { type: 'integer', minimum: 65535, maximum: 2147483647, default: 4194304 },
            // The gRPC metadata key (and HTTP header) that names a request's tenant (global.quotas and
            // the metrics' tenant label); the pooled gateway forwards it. Lower case, as gRPC sends keys.
            tenant_key: { type: 'string', pattern: '^[0-9a-z_.-]+$', default: 'stowage-tenant' },
            // Triton's system shared-memory extension: clients name POSIX shared-memory objects of this
            // machine (/dev/shm) for tensors. false refuses every registration (docs/security.md).
            system_shared_memory: { type: 'boolean', default: true },
            // Seconds in-flight requests get to finish after SIGTERM/SIGINT before the server exits anyway.
            shutdown_grace_seconds: { type: 'number', minimum: 0, maximum: MAX_TIMER_SECONDS, default: 30 },
            // Threads that terminate gRPC and REST beside the main thread, on the same ports (the
            // kernel spreads connections over them): each decodes, admits and encodes, and runs the
            // request path itself. 0: the main thread alone. auto: none below 4 cores, else
            // one per 4 cores, at most 8 (config/edges.ts; docs/performance.md says why).
            edge_threads: { anyOf: [{ const: 'auto' }, { type: 'integer', minimum: 0, maximum: 64 }], default: 'auto' },
            // Status streams (WatchModelControlStatus) open at once on each thread that terminates gRPC
            // (the main thread, each edge); past it RESOURCE_EXHAUSTED. A pooled gateway holds one per
            // node, so a node sees one per gateway: the default leaves room for many gateways and tools
            // while each stream's timer and answers stay bounded.
            max_status_streams: { type: 'integer', minimum: 1, maximum: 65536, default: 64 },
          },
        },
      },
    },
  },
} as const;

/** The node file as ajv leaves it: validated, every default filled in (json-schema-to-ts reads the schema above). */
export type ValidatedConfig = FromSchema<typeof nodeConfigSchema>;

type DeepReadonly<T> = T extends (infer E)[] ? readonly DeepReadonly<E>[] : T extends object ? { readonly [K in keyof T]: DeepReadonly<T[K]> } : T;

/**
 * The configuration every part of the server reads: the validated file, frozen, with model_repo
 * and cache_dir resolved to absolute paths (model_repo '' for a gateway-only process).
 */
export type NodeConfig = DeepReadonly<ValidatedConfig & { model_repo: string }>;
export type RuntimeConfig = NodeConfig['global']['runtime'];
export type SchedulerConfig = NodeConfig['global']['scheduler'];
/** scheduler.models.<name>. */
export type ModelSchedulerConfig = SchedulerConfig['models'][string];
