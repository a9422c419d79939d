/**
 * The device actor's thread: one worker thread per device. It alone touches
 * the device: it owns the ONNX Runtime sessions of every model loaded on it
 * (models.ts), the per-model queues and the scheduler that picks what runs
 * next (scheduler.ts), the weight arena (weight-cache.ts, made in
 * device-memory.ts), the mappings of shared-memory regions (regions.ts) and
 * the tally of its executions, which the main thread counts (execution-costs.ts). The main thread talks to it through
 * `handle.ts` over the channel typed in shared/channels/device.ts, for control
 * calls; every request comes through a door (inbox.ts: the main thread's
 * handle has one, each edge thread one), and hook threads send their
 * preprocessed inputs over doors of theirs.
 *
 * This file wires the parts and says what each step of the dispatch loop
 * (inbox.ts) does: admit everything in the inbox (control calls are answered
 * here, in arrival order; requests join their model's queue), then run one
 * batch (execution.ts), then yield to the event loop. A run goes on a libuv thread (native/ort.ts), so this thread
 * takes messages while it lasts: requests that arrive during the run are admitted
 * and coalesce into the next batch, and a run whose requests have all been
 * cancelled is terminated. Nothing slow happens in the loop besides
 * executions: models arrive compiled (actors/compiler/), so a load only opens
 * weightless sessions.
 */
import { DeviceService, injectedPoison } from './out-of-service.js';
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import type { DeviceCall, DeviceCalls, DeviceCallType, DeviceInit, DeviceSessionsStatus, ExecutionAnswers, FromDevice, HookInputs, InferCommand, ToDevice } from '../../shared/channels/device.js';
import { nowMs } from '../../shared/timers.js';
import { cpuArenaStats, heapBytesInUse, initOrt, processThreadPool, registerCpuArena } from '../../native/ort.js';
import { gpuMemory, loadCuda } from '../../native/cuda.js';
import { modelOf, type InstanceKey } from '../../shared/model-spec.js';
import { errors, toErrorData, type StowageError } from '../../shared/errors.js';
import { ExecutionTally, type ExecutionOutcome } from './execution-costs.js';
import { execute, Staging, verdict, type ExecutionContext } from './execution.js';
import { DeviceModels } from './models.js';
import { DevicePump, Doors } from './inbox.js';
import { Backlog, BacklogLedger, CostModel } from '../../shared/backlog.js';
import { exitArmed, exitIfAsked, holdLoad, loadsMayBeHeld, neverStart } from './fault-injection.js';
import { HookFeeds } from './hook-feeds.js';
import { RegionMappings } from './regions.js';
import { Scheduler, type ShedReason } from './scheduler.js';
import { UploadsAhead } from './uploads-ahead.js';
import { SessionMemory } from './session-memory.js';
import { SessionPool } from './sessions.js';
import { pinOrNot, weightCacheOf } from './device-memory.js';

if (!parentPort) throw new Error('actors/device/worker.js runs as a worker thread');
// ONNX Runtime, once per process: the server made its environment before any device started;
// a device started alone (tests, benches) makes it here, with the same pools.
{
  const { threadPool, intraOpThreads } = workerData as DeviceInit;
  initOrt(processThreadPool(threadPool, intraOpThreads));
}
// Backend cuda: the CUDA libraries, once per process (the server loaded them already; a device
// started alone loads them here).
if ((workerData as DeviceInit).cuda) loadCuda((workerData as DeviceInit).cuda!.libraryDirs);
// Backend cpu: one arena for every session's activations, registered with ONNX Runtime's
// environment once per process (the first device to start registers it; it outlives devices).
if ((workerData as DeviceInit).sessions.sharedActivations && !(workerData as DeviceInit).cuda) registerCpuArena();

const port = parentPort;
const init = workerData as DeviceInit;
const config = init.scheduler;

/** To the main thread. */
function send(msg: FromDevice, transfer: ArrayBuffer[] = []): void {
  port.postMessage(msg, transfer);
}

/** Executions, summed until the main thread hears them (execution-costs.ts). */
const tally = new ExecutionTally((report) => send({ type: 'report', report }));

/**
 * An execution's answers go with their outputs' buffers, each request's through the door it came
 * by (inbox.ts); the execution is tallied in the same step, so it is counted by any `reports` asked
 * after its answers.
 */
function executed(answers: ExecutionAnswers, outcome: ExecutionOutcome): void {
  doors.deliver(answers);
  tally.add(outcome);
}

/** A request failed: answered through its door. */
function fail(id: number, err: unknown): void {
  ledger.left(id);
  doors.fail(id, err);
}

/** A control call failed: answered on the main thread's port. */
function failCall(id: number, err: unknown): void {
  send({ type: 'failed', id, error: toErrorData(err) });
}

const costs = new CostModel(config.ema_halflife_seconds * 1000);
/** What this device publishes of its backlog and its levels' deadline guards (shared/backlog.ts). */
const backlog = new Backlog(init.backlog);
const scheduler = new Scheduler<InferCommand>({
  discipline: config.discipline,
  maxQueueDepth: config.max_queue_depth,
  maxWaitMs: config.dispatch_timeout_seconds * 1000,
  priorityLevels: config.priority_levels,
  defaultPriority: config.default_priority,
  lowerPriorityShare: config.lower_priority_share,
  costs,
  now: nowMs,
  guard: backlog,
  // Read at each pick, once the cache below exists; without a cache every model is on the device.
  // A model whose weights are on their way beside execution counts as on the device: they are by its turn.
  // A model whose session the budget closed is cold too: its call opens it first (sessions.ts).
  ...(config.prefer_resident ? { resident: (instance: InstanceKey) => (weightCache ? weightCache.isResident(instance) || weightCache.isUploading(instance) : true) && models.sessionsOpen(instance) } : {}),
});
/** The weights' arena and cache, and host pinning on a GPU (device-memory.ts). */
const pin = pinOrNot((why) => send({ type: 'warning', message: `device ${init.deviceId}: host memory cannot be pinned here, so copies to the GPU run at pageable speed: ${why}`, fields: { device: init.deviceId } }));
const weightCache = weightCacheOf(init, pin);
// Backend cuda: the GPU memory each model's sessions take, measured around its load (session-memory.ts).
const cuda = init.cuda;
const sessionMemory = cuda
  ? new SessionMemory<InstanceKey>({ free: () => gpuMemory(cuda.ordinal).freeBytes, device: init.deviceId, gpu: cuda.ordinal, arenaBytes: init.weights?.budgetBytes ?? 0, ortArenaLimitBytes: Number(cuda.providerOptions.gpu_mem_limit ?? 0) })
  : null;
// The device's sessions, shared by graph and opened on demand (sessions.ts); a session's bytes are
// what the C heap (the CPU) or the GPU's memory in use grew by across its open.
const sessions = new SessionPool({
  budgetBytes: init.sessions.budgetBytes,
  measure: cuda ? () => { const m = gpuMemory(cuda.ordinal); return m.totalBytes - m.freeBytes; } : heapBytesInUse,
});
const models = new DeviceModels(init, scheduler, costs, weightCache, (message, fields) => send({ type: 'warning', message, fields }), sessions, sessionMemory);

/** The sessions as the status reports them, with the process's shared CPU activation arena. */
function sessionsStatus(): DeviceSessionsStatus {
  const arena = init.sessions.sharedActivations && !cuda ? cpuArenaStats() : null;
  const activations = arena ? { reservedBytes: arena.TotalAllocated ?? 0, inUseBytes: arena.InUse ?? 0, maxInUseBytes: arena.MaxInUse ?? 0 } : null;
  return { ...sessions.report(), activations };
}
// In service until a run poisons the GPU's context (out-of-service.ts); then everything is refused.
const service = new DeviceService(init.deviceId, cuda ? cuda.ordinal : null, (poisoned) => send({ type: 'outOfService', ...poisoned }));
const regions = new RegionMappings(cuda ? cuda.ordinal : null, undefined, (message) => send({ type: 'warning', message, fields: { device: init.deviceId } }));
const execution: ExecutionContext = { deviceId: init.deviceId, models, scheduler, regions, staging: new Staging(init.cuda ? pin : undefined), send, executed, fail, costs,
  // Backend cuda: every run on this thread. ONNX Runtime's CUDA provider keeps cuBLAS and cuDNN
  // state per session and per thread that runs it, for good: runs spread over libuv's threads held
  // 450 MiB of GPU memory per session, runs on one thread 130 (bench/gpu-session-memory.js, H200).
  inlineRunBelowMs: init.cuda ? Infinity : init.inlineRunBelowMs,
  // Backend cuda: inputs reach the GPU from pinned staging (one host copy at memory speed, then the
  // bus at full speed), not from the request's pageable buffer.
  stageInputs: init.cuda !== null,
  uploadsAhead: weightCache && init.weights?.uploadBesideExecution
    ? new UploadsAhead(weightCache, scheduler, (err) => {
      // A copy that met a poisoned GPU takes the device out, as a run's failure would.
      verdict({ outOfService: (e) => service.afterFailedRun(e) }, err);
      send({ type: 'warning', message: `device ${init.deviceId}: an upload beside execution failed, so uploads beside execution are off on this device from now on (each model loads at its turn): ${(err as Error).message}`, fields: { device: init.deviceId } });
    })
    : null,
  running: null,
  outOfService: (err) => service.afterFailedRun(err) };

/** The control calls, each answering with its own reply type. */
const calls: { [K in DeviceCallType]: (request: DeviceCall<K>) => Promise<DeviceCalls[K]['reply']> | DeviceCalls[K]['reply'] } = {
  load: (msg) => models.load(msg),
  unload: (msg) => models.unload(msg.instance, (tickets, name) => {
    for (const t of tickets) fail(t.id, errors.modelNotReady(name, 'UNAVAILABLE', 'it was unloaded'));
  }),
  status: () => ({ instances: models.status(), sessions: sessionsStatus() }),
  setPolicy: (msg) => {
    models.setPolicy(msg.model, msg.policy);
    return {};
  },
  setResidency: (msg) => models.setResidency(msg),
  prefetch: (msg) => models.prefetch(msg.instance),
  compact: () => models.compact(),
  openCudaRegion: (msg) => {
    regions.openCuda(msg.slice);
    return {};
  },
  reports: () => ({}), // the tally goes just before the reply (answer)
};

async function answer<K extends DeviceCallType>(type: K, msg: DeviceCall<K>): Promise<void> {
  if (loadsMayBeHeld && type === 'load') await holdLoad(() => send({ type: 'warning', message: 'fault injection: a load is held', fields: { device: init.deviceId } }));
  // Every reply comes after the tally of every execution answered before it (one port, in order):
  // whatever the main thread reads after a reply counts them.
  tally.report();
  const refused = service.refusal;
  if (refused) return failCall(msg.id, refused);
  try {
    const reply = await calls[type](msg);
    tally.report();
    send({ type: 'reply', id: msg.id, reply });
  } catch (err) {
    // A load, warm-up, compaction or prefetch can meet a poisoned GPU as a run can.
    failCall(msg.id, verdict(execution, err));
  }
}

/** Put a request in its model's queue, or answer it at once (unknown model, full queue). */
function admit(cmd: InferCommand): void {
  const refused = service.refusal;
  if (refused) return fail(cmd.id, refused);
  const model = models.get(cmd.instance);
  if (!model) return fail(cmd.id, errors.modelNotReady(modelOf(cmd.instance), 'UNAVAILABLE', `not loaded on device ${init.deviceId}`));
  try {
    scheduler.enqueue(cmd);
  } catch (err) {
    // The scheduler knows instances; the client knows the model's name.
    fail(cmd.id, (err as StowageError).code === 'STOWAGE_QUEUE_FULL' ? errors.queueFull(model.spec.name, config.max_queue_depth) : err);
  }
}

function shedError(request: InferCommand, reason: ShedReason): StowageError {
  const waitedMs = nowMs() - request.enqueuedAtMs;
  const name = models.nameOf(request.instance);
  if (reason === 'waited') {
    return errors.deadlineExceeded(name, waitedMs, `queued longer than scheduler.dispatch_timeout_seconds (${config.dispatch_timeout_seconds})`);
  }
  if (reason === 'laxity') {
    return errors.deadlineExceeded(name, waitedMs, `${Math.round(request.deadlineMs - nowMs())} ms were left, less than its batch's learned execution time (and its weights' coming on); refused at dispatch instead of run late`);
  }
  return errors.deadlineExceeded(name, waitedMs);
}

/** Requests whose inputs come from a preprocess hook, matched with them whichever comes first (hook-feeds.ts). */
const feeds = new HookFeeds({
  ready: (cmd) => pump.push(cmd),
  expect: (instance) => scheduler.expect(instance),
  arrived: (instance) => scheduler.arrived(instance),
});

/** A hook thread's door (see HookFeed): the inputs of each request it preprocessed for this device. */
function openDoor(door: MessagePort): void {
  door.on('message', (fed: HookInputs) => {
    if (feeds.inputs(fed)) pump.soon();
  });
  door.unref(); // a door never keeps this thread alive
}

/**
 * A request of the run in flight was cancelled (its client went, or its deadline passed): once
 * every request riding in the run has gone, nobody waits for it, and ONNX Runtime is told to stop.
 */
function cancelRunning(id: number): void {
  const running = execution.running;
  if (!running || !running.ids.delete(id)) return;
  if (running.ids.size === 0) running.session.terminate();
}

/** What bringing `instance` on takes before it runs (weights or sessions not there): its last load here, else 0. */
function comingLoadMs(instance: InstanceKey): number {
  const there = (weightCache ? weightCache.isResident(instance) || weightCache.isUploading(instance) : true) && models.sessionsOpen(instance);
  return there ? 0 : scheduler.loadMsOf(instance);
}

/**
 * The backlog every thread admitting a request reads (shared/backlog.ts): each waiting request's
 * predicted share of a run, at its level (its own, else its model's, else the device's default),
 * and the first waiting request of a model that must be brought on, that load too.
 */
const ledger = new BacklogLedger(backlog, (cmd, first) => {
  const policy = scheduler.policyOf(cmd.instance);
  const level = cmd.priority || policy?.priority || config.default_priority || 1;
  const fullRows = Math.max(1, policy?.maxBatchRows ?? 1);
  return { level, ms: (costs.estimate(cmd.instance, fullRows) / fullRows) * cmd.rows + (first ? comingLoadMs(cmd.instance) : 0) };
});

/** The dispatch loop (inbox.ts): the inbox, admitted in order, then one batch per turn. */
const pump = new DevicePump({
  admit,
  answer: (call) => answer(call.type, call),
  next: () => {
    const picked = scheduler.next();
    for (const t of picked.batch) ledger.left(t.id);
    return picked;
  },
  shed: (request, reason) => fail(request.id, shedError(request, reason)),
  refusal: () => {
    if (exitArmed) exitIfAsked();
    const injected = injectedPoison?.(init.deviceId);
    if (injected) service.takeOut(injected);
    return service.refusal;
  },
  fail,
  run: async (batch) => {
    const rows = batch.reduce((sum, t) => sum + t.rows, 0);
    ledger.running(nowMs() + comingLoadMs(batch[0].instance) + costs.estimate(batch[0].instance, rows));
    try {
      await execute(batch, execution);
    } finally {
      ledger.running(0);
    }
  },
  unqueue: (id) => scheduler.cancel(id) !== undefined,
  cancelRunning,
});

/** Drop request `id`: queued, removed and never run; running, it finishes and its answer is dropped. */
function cancel(id: number): void {
  ledger.left(id);
  if (!feeds.cancel(id)) pump.cancel(id);
}

/**
 * The doors every request comes through (the main thread's and each edge's): they join the inbox
 * under ids of this device's own (inbox.ts), in one pump: those of several doors that arrive
 * together run together.
 */
const doors = new Doors({
  admit: (cmd, link, linkId) => {
    ledger.queued(cmd);
    // Only a request whose inputs a hook sends waits for them; any other joins the inbox as it is.
    if (cmd.inputsFromHook) feeds.command(cmd, link, linkId);
    else pump.push(cmd);
    pump.soon();
  },
  cancel,
  hookDoor: openDoor,
  closed: (link) => feeds.forgetLink(link),
});

// The main thread posts what it has for this device once per event-loop turn, as one array.
// All of it joins the inbox before the loop runs, so that requests that came together can run together.
port.on('message', (messages: ToDevice[]) => {
  for (const msg of messages) receive(msg);
  if (pump.waiting) void pump.pump();
});

function receive(msg: ToDevice): void {
  switch (msg.type) {
    case 'forgetRegion':
      regions.forget(msg.regionId);
      return;
    case 'takeOut':
      service.takeOut({ cudaError: msg.cudaError, reason: msg.reason });
      return;
    case 'hookDoor':
      openDoor(msg.port);
      return;
    case 'door':
      doors.open(msg.port, msg.link);
      return;
    case 'load':
    case 'unload':
    case 'status':
    case 'setPolicy':
    case 'setResidency':
    case 'compact':
    case 'prefetch':
    case 'openCudaRegion':
      pump.push(msg);
      return;
    case 'reports':
      // Not queued: answered at once, after the tally (answer).
      void answer('reports', msg);
      return;
    default: {
      const never: never = msg;
      send({ type: 'warning', message: `device actor got an unknown message ${JSON.stringify(never)}`, fields: { device: init.deviceId } });
    }
  }
}

// A worker that never says it started (fault injection: fault-injection.ts) stays alive and hears nothing.
if (neverStart()) {
  port.removeAllListeners('message');
  setInterval(() => undefined, 60_000);
} else {
  send({ type: 'started' });
}
