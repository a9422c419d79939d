/** Fixed facts of the server, in one place. */

export const SERVER_NAME = 'stowage';

/** Every bundle is served as version "1": perf_analyzer parses versions as integers. */
export const MODEL_VERSION = '1';

/** Triton's platform and backend names for what we run, so Triton tools recognise it. */
export const MODEL_PLATFORM = 'onnxruntime_onnx';
export const MODEL_BACKEND = 'onnxruntime';

/**
 * The most priority levels a node file may give (scheduler.priority_levels): a request's priority above it names no
 * level anywhere.
 */
export const MAX_PRIORITY_LEVELS = 1000;

/** Triton's clients set gRPC message limits to INT32_MAX; large tensors must pass. */
export const MAX_MESSAGE_BYTES = 2 ** 31 - 1;

/**
 * Extensions of ServerMetadata, by Triton's names: only what is really implemented (Triton lists
 * classification, sequence, schedule_policy, cuda_shared_memory, trace and
 * model_repository(unload_dependents) too; Stowage serves none of those).
 */
export const SERVER_EXTENSIONS: readonly string[] = ['model_repository', 'model_configuration', 'system_shared_memory', 'binary_tensor_data', 'parameters', 'statistics', 'logging'];

/**
 * A gateway-only process's: shared memory is local to a node, and a gateway serves gRPC only (no binary tensor data).
 */
export const GATEWAY_EXTENSIONS: readonly string[] = SERVER_EXTENSIONS.filter((e) => e !== 'system_shared_memory' && e !== 'binary_tensor_data');

/**
 * How long a device actor may take to start (import ONNX Runtime) before it is declared dead (times
 * STOWAGE_START_TIMEOUT_SCALE, shared/worker-start.ts).
 */
export const DEVICE_START_TIMEOUT_MS = 30_000;

/**
 * The V8 young generation of the device and hook threads, in MiB. Their JavaScript garbage is
 * small and short-lived (messages, tensor descriptors, a hook's temporaries; tensor bytes live
 * outside the heap), but V8 grows an isolate's young generation under sustained allocation and
 * keeps it: left to itself the device's heap went from 18 to 73 MiB reserved over 20 minutes of
 * soak with 8-17 MiB in use, a busy hook thread's to 138 MiB with 8-50 in use, and the process's
 * RSS crept up with them (bench/soak.js). A fixed size keeps those threads' memory flat.
 */
export const WORKER_YOUNG_GENERATION_MIB = 16;

/** How long a model load may take in a device actor (session creation with full optimisation). */
export const MODEL_LOAD_TIMEOUT_MS = 300_000;

/**
 * For a request without a deadline: how long its execution may run once dispatched before the
 * main thread stops waiting (a watchdog against a hung device, not a policy).
 */
export const EXECUTION_WATCHDOG_MS = 120_000;

/**
 * Longest a device holds a model's queue for requests whose preprocess hooks are still running
 * (actors/device/scheduler.ts): the hold is one execution of what is queued, at most this. Rows
 * that come within it ride in one execution instead of paying one each (on a CPU, an ONNX
 * Runtime run of a small model costs about as much at one row as at eight).
 */
export const MAX_HOLD_FOR_INPUTS_MS = 2;

/** A device actor that crashes this many times in a row without serving is not respawned again. */
export const DEVICE_MAX_CONSECUTIVE_CRASHES = 3;

/**
 * An edge thread that crashes this many times in a row, none of its replacements listening for
 * EDGE_HEALTHY_AFTER_MS, is not replaced again: the other edges keep serving on the same ports.
 */
export const EDGE_MAX_CONSECUTIVE_CRASHES = 5;
/** How long a replacement edge must listen without crashing for its crashes in a row to start again at 0. */
export const EDGE_HEALTHY_AFTER_MS = 30_000;

/**
 * An edge's door to a device whose worker ended: how long its pending requests wait for the main
 * thread to say why (the exit code only the main thread sees) before they fail without it.
 */
export const DOOR_EXIT_WHY_WAIT_MS = 1_000;

/** The weight cache warns of thrash when the models used within this window need more than the budget. */
export const WEIGHT_THRASH_WINDOW_SECONDS = 10;

/** Alignment, in bytes, of every block of a device's weight arena (and so of its budget). */
export const ARENA_ALIGNMENT = 64;

/** The compiler thread's nice value (Linux): compiles yield the CPU to the threads serving requests. */
export const COMPILER_NICE = 10;

/**
 * The device's default for runtime.inline_run_below_ms where a handle is made without one (the
 * node file's default is the schema's): an execution whose learned cost is below it runs on the
 * device thread itself. Handing a run to a libuv thread and back costs tens of microseconds (a
 * one-op graph: 54 µs through the hop against 11 µs inline, bench/binding.js on the 2-vCPU
 * machine of docs/performance.md), and there a device thread awake beside a run's own threads
 * slowed the convnet at concurrency 8 to 0.82x of running it inline.
 */
export const INLINE_RUN_BELOW_MS = 50;


/**
 * Uploads beside execution (actors/device/uploads-ahead.ts): the most models whose weights are on
 * their way at once. One ResNet-50's 97 MiB copies in about 2 ms at 54 GB/s pinned (docs/gpu.md),
 * about as long as its batch-1 run: two ahead keep the copy engine busy through a run without
 * evicting, for models that wait further back, weights that may be used sooner.
 */
export const MAX_UPLOADS_AHEAD = 2;

/** A CUDA IPC handle's size (cudaIpcMemHandle_t): what CudaSharedMemoryRegister's raw_handle must be. */
export const CUDA_IPC_HANDLE_BYTES = 64;
