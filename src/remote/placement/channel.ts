/**
 * The channel between a pooled gateway's main thread and its placement thread
 * (remote/placement/): every message both ways, typed here and nowhere else.
 *
 * A check is two messages: `read` when it starts (the placement thread reads every node's status
 * while the main thread probes their health), then `place` with what the probes found; the
 * placement thread reads the indexes that changed, places, and answers `placed` after the
 * `served` and `routes` messages the check made. Routes that switch later (a prefetch done) come
 * as `routes` on their own. Everything here is structured-cloned; the largest is a node's list of
 * models, sent only when it changes, and once per repository digest.
 */
import type { FleetOptions } from '../../routing/fleet-placement.js';
import type { RoutesChange } from '../placed-routes.js';

/** What the placement thread is started with (its workerData). */
export interface PlacementStart {
  logLevel: string;
  fleet: FleetOptions;
  /** gateway.request_timeout_seconds: how long a node gets to prefetch a model before its requests switch anyway. */
  prefetchTimeoutMs: number;
  /** gateway.health_seconds: the window the nodes report loads over. */
  windowSeconds: number;
  /** gateway.scheduling.pooled.report_max_age_seconds. */
  reportMaxAgeMs: number;
  /** gateway.scheduling.pooled.min_move_age_seconds, in checks (FleetRoutesOptions'). */
  minMoveChecks: number;
  /** How long a node gets to answer a status read (past it the read counts as failed; the node keeps serving). */
  readTimeoutMs: number;
  /**
   * How long a node gets to answer a RepositoryIndex read: 10,000 models are ~0.5 MB, and 64 of them
   * at a gateway's start, decoded on one thread, took longer than a status read may.
   */
  indexTimeoutMs: number;
  /** endpoints.http2_window_bytes. */
  windowBytes: number;
}

/** A node as the main thread's health checks and discovery see it. */
export interface PlacementMember {
  address: string;
  up: boolean;
  draining: boolean;
}

export type ToPlacement =
  /** A check starts: read these nodes' status now (the others are forgotten). */
  | { type: 'read'; addresses: string[] }
  /** The health probes are done: place with these members once their status reads are. */
  | { type: 'place'; id: number; members: PlacementMember[] }
  | { type: 'metrics'; id: number }
  | { type: 'stop' };

export type FromPlacement =
  | { type: 'started' }
  /**
   * The models a node serves ready changed (its index was read), under its repository digest;
   * `models` null: the list this thread sent last for that digest, which another address still has
   * (nodes of one repository share one list on both threads).
   */
  | { type: 'served'; address: string; digest: string; models: string[] | null }
  | { type: 'routes'; change: RoutesChange }
  /** Two addresses report one node name: the older process should drain. */
  | { type: 'superseded'; older: string; newer: string }
  | { type: 'placed'; id: number }
  | { type: 'metrics'; id: number; text: string };
