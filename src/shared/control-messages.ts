/**
 * The control service's status messages (proto/control.proto), defined once here: as the node's
 * operation answers them (`Int` = number: 64-bit integers as numbers, node/control-service.ts), and
 * as @grpc/proto-loader decodes them with protocol/proto.ts's options (`Int` = string, the
 * default: decimal strings), read by the control client (client/control.ts) and by a pooled
 * gateway (remote/remote-node.ts).
 */

/** How a message's 64-bit integers come: numbers from the node's operation, decimal strings off the wire. */
type Int = number | string;

/** One model as ModelControlStatus reports it. */
export interface ModelControlStatus<I extends Int = string> {
  name: string;
  /** LOADING, READY, UNLOADING, UNAVAILABLE. */
  state: string;
  reason: string;
  /** The loaded version serving it (`name#generation`). */
  instance: string;
  /** Where its weights live at rest: device, system or unpinned. */
  residency: string;
  /** Bytes of its weights on devices now, summed over the devices. */
  resident_bytes: I;
  /** The device holding its weights now; -1 if none or several. */
  device: number;
  queue_depth: number;
  learned_cost: { batch_size: number; ms: number }[];
  weight: number;
  max_batch_size: number;
  /** The devices its requests go to (lpt_packing: its placement). */
  placed_devices: number[];
  /** Backend cuda: GPU memory its sessions took at load, summed over the devices. */
  session_device_bytes: I;
  /** runtime.cuda.graphs: whether its runs use CUDA graphs, or why not; empty otherwise. */
  cuda_graphs: string;
  /** Bytes of its weights on one device when resident (0: embedded). */
  weight_bytes: I;
  /** Device time its executions took on this node so far, summed over the devices. */
  compute_seconds: number;
  /** Executions that found its weights on the device, and those that brought them on first. */
  weight_hits: I;
  weight_misses: I;
  /** With window_seconds asked: device-seconds per second its executions took over the last whole window. */
  window_load: number;
  /** With window_seconds asked: bytes of its weights on devices as that window ended. */
  window_resident_bytes: I;
  /** With window_seconds asked: rows per second that came for it over that window (answered, plus queue growth). */
  window_rate: number;
  /** With window_seconds asked: rows per second one device answers of it at full batches (0: no costs learned). */
  window_capacity: number;
  /** With window_seconds asked: device-seconds a second its batches waited for weights over the window (cold loads). */
  window_weight_load: number;
  /** The session it runs on: shared with how many models (and the graph), or why its own; closed or not. */
  session: string;
  /** Its share of its open sessions' bytes (each session's over the models sharing it), summed over the devices. */
  session_bytes: I;
}

/** ModelControlStatus's answer: every model asked for, and the node's own figures. */
export interface ModelControlStatusReply<I extends Int = string> {
  models: ModelControlStatus<I>[];
  /** The node's weight budget, summed over its devices (0: the weight cache off). */
  weight_budget_bytes: I;
  /** Its device actors in service. */
  devices: number;
  /** Requests queued on its devices. */
  queue_depth: number;
  /** How old the devices' state it answers from is. */
  snapshot_age_seconds: number;
  /** The node's stable name (node_name), what a pooled gateway places by. */
  node_name: string;
  /** When the node's process started (ms since the epoch): of two addresses with one name, the newer serves. */
  started_unix_ms: I;
  /** A digest of the models it knows and their states: unchanged while its RepositoryIndex is. */
  repository_digest: string;
  /** runtime.session_budget_bytes summed over its devices (0: none). */
  session_budget_bytes: I;
  /** With `versioned`: the version of the report it answers from (node/report-versions.ts); else 0. */
  report_version: I;
  /** true: `models` holds only the rows changed since `since_version`, `gone` the models that left. */
  changes_only: boolean;
  gone: string[];
  /** With window_seconds: when the window the window_ figures are over ended (epoch ms, the node's clock); else 0. */
  window_end_unix_ms: I;
}
