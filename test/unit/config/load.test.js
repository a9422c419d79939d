import path from 'node:path';
import test from 'ava';
import { environmentOverrides, parseNodeConfig } from '../../../dist/config/load.js';
import { weightCacheInit } from '../../../dist/config/weight-budget.js';
import { stowageThrows } from '../../helpers/errors.js';

const FILE = '/etc/stowage/node.yaml';
/**
 * @param {string} text
 * @param {Record<string, string>} [env]
 */
const parse = (text, env = {}) => parseNodeConfig(text, FILE, env, '/work/here');

test('defaults fill every key and the result is frozen', (t) => {
  const { config } = parse('model_repo: models\n');
  t.deepEqual(config.models_include, []);
  t.is(config.node_name, '', 'empty: derived at start (node/node-name.ts)');
  t.is(config.gpus, 'auto');
  t.deepEqual(config.gateway, { endpoints: [], metrics_endpoints: [], discovery: { dns_name: '', port: 8001, metrics_port: 0, interval_seconds: 5, resolver: '' }, max_concurrent_streams: 32, request_timeout_seconds: 60, health_seconds: 2, scheduling: { mode: 'round_robin', default_replicas: 1, routing_fill_factor: 1, routing_policy: 'fill_rr', rebalance_compute_seconds: 30, models: {}, pooled: { epsilon: 0.1, stickiness: 0.15, replica_load: 0.5, report_max_age_seconds: 10, min_move_age_seconds: 30 } } });
  t.deepEqual(config.global, {
    model_control_mode: 'dynamic',
    model_poll_seconds: 15,
    logging: { level: 'info' },
    tracing: { exporter: 'none', endpoint: '', protocol: 'http/protobuf', sample_ratio: 1 },
    runtime: {
      backend: 'cpu', warmup: 'auto', cuda: { tf32: true, cudnn_conv_algo_search: 'exhaustive', ort_arena_limit_bytes: 0, weight_cache_bytes: 0, graphs: false, shared_arena: false }, intra_op_threads: 0, inline_run_below_ms: 50, thread_pool: 'per_session', share_sessions: true, share_activations: true, session_budget_bytes: 0, session_per_batch_size: 'auto', cpu_device_memory_bytes: 1073741824, mem_fraction: 0.9, preallocate: true,
      weight_cache_fraction: 1, weight_cache_wiggle_fraction: 0.1, upload_beside_execution: 'auto',
    },
    scheduler: { discipline: 'fair', prefer_resident: true, ema_halflife_seconds: 30, max_queue_depth: 1024, priority_levels: 3, default_priority: 2, lower_priority_share: 0.1, dispatch_timeout_seconds: 30, compaction_interval: 0, models: {} },
    quotas: { tenants: {}, models: {} },
    hooks: { threads: 0, timeout_seconds: 10, import_timeout_seconds: 30, max_heap_mib: 1024 },
    endpoints: {
      host: '127.0.0.1', grpc_port: 8001, http_port: 8000, admin_port: 8002, max_inflight_bytes: 1073741824, max_concurrent_requests: 0, http2_window_bytes: 4194304,
      max_receive_message_bytes: 2147483647, max_send_message_bytes: 2147483647, max_json_body_bytes: 67108864, http_request_timeout_seconds: 60, system_shared_memory: true, shutdown_grace_seconds: 30, edge_threads: 'auto', max_status_streams: 64,
      tenant_key: 'stowage-tenant',
    },
  });
  t.true(Object.isFrozen(config.global.endpoints));
  // @ts-expect-error -- the type says readonly too; this checks the object is frozen at run time
  t.throws(() => { config.global.endpoints.grpc_port = 1; }, { instanceOf: TypeError });
});

test('a relative model_repo is resolved against the node file\'s directory', (t) => {
  t.is(parse('model_repo: models\n').config.model_repo, '/etc/stowage/models');
  t.is(parse('model_repo: /srv/models\n').config.model_repo, '/srv/models');
});

test('an unknown key names its path and the keys allowed there', (t) => {
  const err = stowageThrows(t, () => parse('model_repo: m\nglobal:\n  endpoints:\n    grpc_prot: 1\n'));
  t.is(err.code, 'STOWAGE_CONFIG_INVALID');
  t.regex(err.message, /global\.endpoints\.grpc_prot: unknown key; allowed here: host, grpc_port, http_port, admin_port, max_inflight_bytes, max_concurrent_requests/);
});

test('a wrong type names the key path, the value and what was expected', (t) => {
  const err = stowageThrows(t, () => parse('model_repo: m\nglobal:\n  endpoints:\n    grpc_port: "eighty"\n'));
  t.regex(err.message, /global\.endpoints\.grpc_port: "eighty" must be integer/);
  const err2 = stowageThrows(t, () => parse('model_repo: m\nglobal:\n  runtime:\n    backend: tpu\n'));
  t.regex(err2.message, /global\.runtime\.backend: "tpu" is not allowed; expected one of "cpu", "cuda"/);
});

test('every problem is reported at once, and a missing model_repo is named', (t) => {
  const err = stowageThrows(t, () => parse('global:\n  endpoints:\n    grpc_port: -1\n    admin_port: 70000\n'));
  t.regex(err.message, /missing required key model_repo/);
  t.regex(err.message, /grpc_port: -1 must be >= 0/);
  t.regex(err.message, /admin_port: 70000 must be <= 65535/);
});

test('YAML that is not a mapping, or not YAML at all, is refused with the file name', (t) => {
  t.regex(t.throws(() => parse('- a\n- b\n')).message, /node\.yaml: the node file must be a YAML mapping/);
  t.regex(t.throws(() => parse('model_repo: [\n')).message, /node\.yaml: not valid YAML/);
});

test('gpus is auto, a count or a list of ids; lpt_packing needs fifo or edf devices', (t) => {
  t.is(parse('model_repo: m\ngpus: 4\n').config.gpus, 4);
  t.deepEqual(parse('model_repo: m\ngpus: [0, 2]\n').config.gpus, [0, 2]);
  t.is(parse('model_repo: m\n', { INFERENCE_SERVER_GPUS: '3' }).config.gpus, 3);
  t.deepEqual(parse('model_repo: m\n', { INFERENCE_SERVER_GPUS: '1:3' }).config.gpus, [1, 3]);
  t.regex(t.throws(() => parse('model_repo: m\ngpus: 0\n')).message, /gpus/);
  t.regex(t.throws(() => parse('model_repo: m\ngpus: 2\ngateway:\n  scheduling:\n    mode: lpt_packing\n')).message,
    /"lpt_packing" needs every device to run scheduler.discipline fifo or edf, but worker0, worker1 run "fair" \(the default\)/);
  const lpt = parse('model_repo: m\ngpus: 2\nglobal:\n  scheduler: { discipline: fifo }\ngateway:\n  scheduling:\n    mode: lpt_packing\n    default_replicas: all\n    models: { hot: { replicas: 2 } }\n').config.gateway.scheduling;
  t.deepEqual(lpt, { mode: 'lpt_packing', default_replicas: 'all', routing_fill_factor: 1, routing_policy: 'fill_rr', rebalance_compute_seconds: 30, models: { hot: { replicas: 2 } }, pooled: { epsilon: 0.1, stickiness: 0.15, replica_load: 0.5, report_max_age_seconds: 10, min_move_age_seconds: 30 } });
  t.regex(t.throws(() => parse('model_repo: m\ngateway:\n  scheduling:\n    routing_policy: fill_most\n')).message, /gateway\.scheduling\.routing_policy: "fill_most" is not allowed/);
});

test('backend cuda parses, and its settings become ONNX Runtime\'s CUDA provider options', async (t) => {
  const { cudaProviderOptions } = await import('../../../dist/config/cuda-options.js');
  const { config } = parse('model_repo: m\nglobal:\n  runtime:\n    backend: cuda\n');
  t.is(config.global.runtime.backend, 'cuda');
  t.deepEqual(cudaProviderOptions(config.global.runtime.cuda), { use_tf32: '1', cudnn_conv_algo_search: 'EXHAUSTIVE', arena_extend_strategy: 'kSameAsRequested' });
  const set = parse('model_repo: m\nglobal:\n  runtime:\n    backend: cuda\n    cuda: { tf32: false, cudnn_conv_algo_search: heuristic, ort_arena_limit_bytes: 1073741824 }\n').config;
  t.deepEqual(cudaProviderOptions(set.global.runtime.cuda), { use_tf32: '0', cudnn_conv_algo_search: 'HEURISTIC', arena_extend_strategy: 'kSameAsRequested', gpu_mem_limit: '1073741824' });
  t.regex(t.throws(() => parse('model_repo: m\nglobal:\n  runtime:\n    cuda: { tf32: maybe }\n')).message, /global\.runtime\.cuda\.tf32/);
});

test('intra_op_threads 0 means one per core on backend cpu and one thread on backend cuda; a number set is kept on both', async (t) => {
  const { intraOpThreadsFor } = await import('../../../dist/config/cuda-options.js');
  t.is(intraOpThreadsFor('cpu', 0), 0, 'ONNX Runtime chooses: one per core');
  t.is(intraOpThreadsFor('cuda', 0), 1);
  t.is(intraOpThreadsFor('cuda', 4), 4);
  t.is(intraOpThreadsFor('cpu', 3), 3);
});

test('on backend cuda, gpus names CUDA ordinals the process sees, and a worker\'s cuda block merges over global\'s', async (t) => {
  const { resolveWorkers } = await import('../../../dist/config/workers.js');
  const found = { ordinals: [0, 1], freeBytes: (/** @type {number} */ o) => (o + 1) * 2 ** 30 };
  const auto = resolveWorkers(parse('model_repo: m\nglobal:\n  runtime:\n    backend: cuda\n').config, 'node.yaml', found);
  t.deepEqual(auto.map((w) => w.deviceId), [0, 1]);
  // The budget: each GPU's free memory x mem_fraction x weight_cache_fraction x (1 - wiggle).
  t.is(auto[1].weights?.budgetBytes, Math.floor((2 * 2 ** 30 * 0.9 * 0.9) / 64) * 64);
  const fixed = resolveWorkers(parse('model_repo: m\nglobal:\n  runtime:\n    backend: cuda\n    cuda: { weight_cache_bytes: 1000033 }\n').config, 'node.yaml', found);
  t.is(fixed[0].weights?.budgetBytes, 1000000); // rounded down to the arena alignment (64)
  t.regex(t.throws(() => resolveWorkers(parse('model_repo: m\ngpus: [0, 3]\nglobal:\n  runtime:\n    backend: cuda\n').config, 'node.yaml', found)).message, /gpus: \[0,3\] names GPU 3, but this process sees 2/);
  // A GPU listed twice: two actors on it, numbered by position, splitting its free memory.
  const twice = resolveWorkers(parse('model_repo: m\ngpus: [1, 1, 0]\nglobal:\n  runtime:\n    backend: cuda\n').config, 'node.yaml', found);
  t.deepEqual(twice.map((w) => [w.name, w.deviceId, w.gpu]), [['worker0', 0, 1], ['worker1', 1, 1], ['worker2', 2, 0]]);
  t.is(twice[0].weights?.budgetBytes, Math.floor((2 ** 30 * 0.9 * 0.9) / 64) * 64, 'half of GPU 1\'s 2 GiB');
  t.is(twice[2].weights?.budgetBytes, Math.floor((2 ** 30 * 0.9 * 0.9) / 64) * 64, 'all of GPU 0\'s 1 GiB');
  t.regex(t.throws(() => resolveWorkers(parse('model_repo: m\ngpus: [1, 1]\nglobal:\n  runtime:\n    backend: cuda\n    cuda: { weight_cache_bytes: 1500000000 }\n').config, 'node.yaml', found)).message,
    /weight_cache_bytes: 1500000000 is more than GPU 1's free memory shared by the 2 actors driving it \(1073741824 bytes each\)/);
  const merged = resolveWorkers(parse('model_repo: m\nglobal:\n  runtime:\n    backend: cuda\nworkers:\n  - { name: a, gpu: 1, runtime: { cuda: { tf32: false } } }\n').config, 'node.yaml', found);
  t.deepEqual(merged[0].runtime.cuda, { tf32: false, cudnn_conv_algo_search: 'exhaustive', ort_arena_limit_bytes: 0, weight_cache_bytes: 0, graphs: false, shared_arena: false });
});

test('environment variables override the file, typed by the schema', (t) => {
  const { config, overrides } = parse('model_repo: m\nglobal:\n  endpoints:\n    grpc_port: 8001\n', {
    INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: '9001',
    INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT: '9002',
    INFERENCE_SERVER_MODEL_REPO: 'relative/repo',
    INFERENCE_SERVER_LOGGING_LEVEL: 'debug',
    UNRELATED: 'x',
  });
  t.is(config.global.endpoints.grpc_port, 9001);
  t.is(config.global.endpoints.admin_port, 9002);
  t.is(config.global.logging.level, 'debug');
  t.is(config.model_repo, path.resolve('/work/here', 'relative/repo'), 'an env path is relative to the working directory');
  t.deepEqual(overrides.sort(), ['INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT', 'INFERENCE_SERVER_ENDPOINTS_GRPC_PORT',
    'INFERENCE_SERVER_LOGGING_LEVEL', 'INFERENCE_SERVER_MODEL_REPO']);
});

test('an override supplies a key the file leaves out', (t) => {
  t.is(parse('{}\n', { INFERENCE_SERVER_MODEL_REPO: '/srv/m' }).config.model_repo, '/srv/m');
});

test('a bad override value is reported like a bad file value', (t) => {
  const err = stowageThrows(t, () => parse('model_repo: m\n', { INFERENCE_SERVER_ENDPOINTS_GRPC_PORT: 'abc' }));
  t.regex(err.message, /global\.endpoints\.grpc_port: "abc" must be integer/);
});

test('an unknown INFERENCE_SERVER_ variable stops start-up and lists the known ones', (t) => {
  const err = stowageThrows(t, () => parse('model_repo: m\n', { INFERENCE_SERVER_ENDPOINTS_GRPC_PROT: '1' }));
  t.regex(err.message, /unknown environment override INFERENCE_SERVER_ENDPOINTS_GRPC_PROT; known overrides: .*INFERENCE_SERVER_ENDPOINTS_GRPC_PORT/);
});

test('the override table is derived from the schema', (t) => {
  const names = environmentOverrides().map((o) => o.env);
  for (const n of ['INFERENCE_SERVER_MODEL_REPO', 'INFERENCE_SERVER_ENDPOINTS_HOST', 'INFERENCE_SERVER_ENDPOINTS_GRPC_PORT',
    'INFERENCE_SERVER_ENDPOINTS_ADMIN_PORT', 'INFERENCE_SERVER_RUNTIME_BACKEND', 'INFERENCE_SERVER_SCHEDULER_DISPATCH_TIMEOUT_SECONDS']) {
    t.true(names.includes(n), n);
  }
});

test('a subsection of global takes overrides too: INFERENCE_SERVER_RUNTIME_CUDA_<FIELD> sets global.runtime.cuda.<field>, checked as from the file', (t) => {
  const { config } = parse('model_repo: m\n', { INFERENCE_SERVER_RUNTIME_CUDA_GRAPHS: 'true', INFERENCE_SERVER_RUNTIME_CUDA_TF32: 'false', INFERENCE_SERVER_RUNTIME_CUDA_CUDNN_CONV_ALGO_SEARCH: 'heuristic' });
  t.true(config.global.runtime.cuda.graphs);
  t.false(config.global.runtime.cuda.tf32);
  t.is(config.global.runtime.cuda.cudnn_conv_algo_search, 'heuristic');
  t.is(config.global.runtime.cuda.weight_cache_bytes, 0, 'the rest of the subsection keeps its defaults');
  const fromFile = parse('model_repo: m\nglobal:\n  runtime:\n    cuda: { graphs: false, tf32: true }\n', { INFERENCE_SERVER_RUNTIME_CUDA_GRAPHS: 'true' }).config;
  t.true(fromFile.global.runtime.cuda.graphs, 'the environment wins over the file');
  t.true(fromFile.global.runtime.cuda.tf32);
  t.regex(stowageThrows(t, () => parse('model_repo: m\n', { INFERENCE_SERVER_RUNTIME_CUDA_GRAPHS: 'yes' })).message, /global\.runtime\.cuda\.graphs/);
});

test('cache_dir: relative to the node file, from the environment relative to the working directory, else the XDG cache', (t) => {
  t.is(parse('model_repo: m\ncache_dir: cache\n').config.cache_dir, '/etc/stowage/cache');
  t.is(parse('model_repo: m\n', { INFERENCE_SERVER_CACHE_DIR: 'c' }).config.cache_dir, '/work/here/c');
  t.is(parse('model_repo: m\n', { XDG_CACHE_HOME: '/var/cache' }).config.cache_dir, '/var/cache/stowage');
});

test('the weight cache keys are checked: residency by name, fractions by range', (t) => {
  const err = stowageThrows(t, () => parse('model_repo: m\nglobal:\n  scheduler:\n    models:\n      digits:\n        residency: gpu\n'));
  t.regex(err.message, /global\.scheduler\.models\.digits\.residency: "gpu" is not allowed; expected one of "device", "system", "unpinned"/);
  const err2 = stowageThrows(t, () => parse('model_repo: m\nglobal:\n  runtime:\n    weight_cache_wiggle_fraction: 1\n'));
  t.regex(err2.message, /global\.runtime\.weight_cache_wiggle_fraction: 1 must be < 1/);
  const { config } = parse('model_repo: m\n', { INFERENCE_SERVER_RUNTIME_CPU_DEVICE_MEMORY_BYTES: '1000000', INFERENCE_SERVER_SCHEDULER_COMPACTION_INTERVAL: '4' });
  t.is(config.global.runtime.cpu_device_memory_bytes, 1000000);
  t.is(config.global.scheduler.compaction_interval, 4);
});

test('workers: one per device, their runtime and scheduler blocks over global; the models: map pins per worker', async (t) => {
  const { resolveWorkers } = await import('../../../dist/config/workers.js');
  const { config } = parse([
    'model_repo: m',
    'global:',
    '  runtime: { cpu_device_memory_bytes: 1000000, intra_op_threads: 2 }',
    '  scheduler: { discipline: fifo, models: { digits: { weight: 3 } } }',
    'workers:',
    '  - { name: big, gpu: 3, runtime: { cpu_device_memory_bytes: 9000000 } }',
    '  - { name: edfy, scheduler: { discipline: edf, models: { digits: { max_batch_size: 4 } } } }',
    'models:',
    '  digits: [edfy]',
    '',
  ].join('\n'));
  const [big, edfy] = resolveWorkers(config);
  t.like(big, { name: 'big', deviceId: 3, runtime: { cpu_device_memory_bytes: 9000000, intra_op_threads: 2 }, scheduler: { discipline: 'fifo' } });
  t.deepEqual(big.scheduler.models, { digits: { weight: 3 } });
  t.like(edfy, { name: 'edfy', deviceId: 1, runtime: { cpu_device_memory_bytes: 1000000 }, scheduler: { discipline: 'edf', max_queue_depth: 1024 } });
  t.deepEqual(edfy.scheduler.models, { digits: { weight: 3, max_batch_size: 4, residency: 'device' } });
  // Without workers:, the devices of gpus: are worker0, worker1, ...
  const two = resolveWorkers(parse('model_repo: m\ngpus: 2\nmodels:\n  digits: [worker1]\n').config);
  t.deepEqual(two.map((w) => [w.name, w.deviceId, w.scheduler.models.digits?.residency]), [['worker0', 0, undefined], ['worker1', 1, 'device']]);
  // Two workers on one device (a's gpu 1, and b's by its index) are both kept, numbered by position.
  const pair = resolveWorkers(parse('model_repo: m\nworkers:\n  - { name: a, gpu: 1 }\n  - { name: b }\n').config);
  t.deepEqual(pair.map((w) => [w.name, w.deviceId, w.gpu]), [['a', 0, 1], ['b', 1, 1]]);
});

test('workers and the models: map are checked: names, devices, keys', (t) => {
  t.regex(t.throws(() => parse('model_repo: m\nmodels:\n  digits: [gpu7]\n')).message, /models\.digits: no worker named "gpu7"; workers: worker0/);
  t.regex(t.throws(() => parse('model_repo: m\nworkers:\n  - { name: a }\n  - { name: a }\n')).message, /the name "a" is used twice/);
  t.regex(t.throws(() => parse('model_repo: m\nworkers:\n  - { name: a, endpoints: {} }\n')).message, /workers\.0\.endpoints: unknown key; allowed here: name, gpu, runtime, scheduler/);
  t.regex(t.throws(() => parse('model_repo: m\nworkers:\n  - { name: a, scheduler: { discipline: lifo } }\n')).message, /workers\.0\.scheduler\.discipline: "lifo" is not allowed/);
  t.false(environmentOverrides().some((o) => o.env === 'INFERENCE_SERVER_WORKERS'), 'a list of mappings does not come from the environment');
});

test('priority levels: a default or a model\'s priority above scheduler.priority_levels stops the start, naming the keys', (t) => {
  t.regex(t.throws(() => parse('model_repo: m\nglobal:\n  scheduler: { priority_levels: 2, default_priority: 3 }\n')).message,
    /scheduler\.default_priority 3 above scheduler\.priority_levels 2 \(worker worker0\): levels run from 1 \(the highest\) to 2/);
  t.regex(t.throws(() => parse('model_repo: m\nglobal:\n  scheduler: { models: { digits: { priority: 5 } } }\n')).message, /scheduler\.models\.digits\.priority 5 above scheduler\.priority_levels 3/);
  t.like(parse('model_repo: m\nglobal:\n  scheduler: { priority_levels: 5, models: { digits: { priority: 5 } } }\n').config.global.scheduler, { priority_levels: 5, default_priority: 2 });
});

test('what one process has once (the backend, ONNX Runtime\'s thread pool) a worker may not change', async (t) => {
  const { resolveWorkers } = await import('../../../dist/config/workers.js');
  const pools = () => parse('model_repo: m\nglobal:\n  runtime: { thread_pool: process }\nworkers:\n  - { name: a, runtime: { thread_pool: per_session } }\n').config;
  t.regex(t.throws(pools).message, /workers\.a\.runtime\.thread_pool: "per_session" differs from global\.runtime\.thread_pool "process"; one process has one ONNX Runtime/);
  const backends = () => parse('model_repo: m\nworkers:\n  - { name: a, runtime: { backend: cuda } }\n');
  t.regex(t.throws(backends).message, /workers\.a\.runtime\.backend: "cuda" differs from global\.runtime\.backend "cpu"/);
  t.is(resolveWorkers(parse('model_repo: m\nglobal:\n  runtime: { thread_pool: process }\nworkers:\n  - { name: a }\n').config)[0].runtime.thread_pool, 'process');
});

test('a gateway-only process lists its nodes instead of a model repository', (t) => {
  const { config } = parse('gateway:\n  endpoints: ["10.0.0.1:8001", "node2:8001"]\n  metrics_endpoints: ["node2:8002"]\n');
  t.deepEqual(config.gateway.endpoints, ['10.0.0.1:8001', 'node2:8001']);
  t.is(config.model_repo, '');
  t.regex(t.throws(() => parse('gateway:\n  endpoints: ["node2"]\n')).message, /gateway\.endpoints\.0: "node2" must match pattern/);
  t.regex(t.throws(() => parse('gateway:\n  endpoints: ["a:1"]\n  scheduling: { mode: lpt_packing }\n')).message, /a gateway-only process \(gateway.endpoints or gateway.discovery\) routes with round_robin, least_outstanding or pooled/);
  t.regex(t.throws(() => parse('model_repo: m\ngateway:\n  scheduling: { mode: pooled }\n')).message, /"pooled" places models across the nodes of a fleet, in a gateway-only process/);
  const pooled = parse('gateway:\n  endpoints: ["a:1"]\n  scheduling: { mode: pooled, pooled: { epsilon: 0.2 } }\n').config.gateway.scheduling;
  t.deepEqual([pooled.mode, pooled.pooled], ['pooled', { epsilon: 0.2, stickiness: 0.15, replica_load: 0.5, report_max_age_seconds: 10, min_move_age_seconds: 30 }]);
  t.regex(t.throws(() => parse('gateway:\n  endpoints: ["a:1"]\n  scheduling: { mode: pooled, pooled: { epsilon: 0 } }\n')).message, /gateway\.scheduling\.pooled\.epsilon/);
});

test('upload_beside_execution: auto is on for backend cuda and off for cpu; true and false, also from the environment, are as they say', (t) => {
  const beside = (/** @type {string} */ text, env = {}) => {
    const { config } = parse(`model_repo: m\n${text}`, env);
    return weightCacheInit(config.global.runtime, config.global.scheduler, '/cache')?.uploadBesideExecution;
  };
  t.false(beside(''));
  t.true(beside('global:\n  runtime:\n    backend: cuda\n'));
  t.true(beside('global:\n  runtime:\n    upload_beside_execution: true\n'));
  t.false(beside('global:\n  runtime:\n    backend: cuda\n    upload_beside_execution: false\n'));
  t.true(beside('', { INFERENCE_SERVER_RUNTIME_UPLOAD_BESIDE_EXECUTION: 'true' }));
  t.false(beside('global:\n  runtime:\n    backend: cuda\n', { INFERENCE_SERVER_RUNTIME_UPLOAD_BESIDE_EXECUTION: 'false' }));
  const err = stowageThrows(t, () => parse('model_repo: m\nglobal:\n  runtime:\n    upload_beside_execution: sometimes\n'));
  t.regex(err.message, /global\.runtime\.upload_beside_execution/);
});

test('a timer\'s duration past what one timer holds stops the start, saying why; at the limit it loads', (t) => {
  for (const key of ['scheduler:\n    dispatch_timeout_seconds', 'endpoints:\n    shutdown_grace_seconds', 'hooks:\n    timeout_seconds', 'endpoints:\n    http_request_timeout_seconds']) {
    const err = stowageThrows(t, () => parse(`model_repo: m\nglobal:\n  ${key}: 2147484\n`));
    t.regex(err.message, /: 2147484 must be <= 2147483 \(seconds: about 24\.8 days, the longest a timer can wait\)/, key);
    t.notThrows(() => parse(`model_repo: m\nglobal:\n  ${key}: 2147483\n`), key);
  }
  const poll = stowageThrows(t, () => parse('model_repo: m\nglobal:\n  model_poll_seconds: 1e12\n'));
  t.regex(poll.message, /global\.model_poll_seconds: 1000000000000 must be <= 2147483/);
});
