/**
 * Deadlines kept or refused at once, at admission (issue 65 item 2), on the thread that holds the
 * request: a request with a deadline is refused DEADLINE_EXCEEDED before anything of it runs when
 * the work ahead of it on the device (shared/backlog.ts: the batch running now and what waits at its
 * priority level and above, as the device publishes it) and its own run would end past its deadline.
 * The device checks again at dispatch for every request of a batch (actors/device/scheduler.ts).
 *
 * Its own run is what this thread learned of its model: a moving average of the executions its
 * answers rode in (input, infer and output time of the whole batch: what a request waits from its
 * batch's start to its answer). A model this thread has not seen run yet is never refused here
 * (the device's check at dispatch still holds). The work ahead is read on the device its lease
 * leads to (the rooms choose it before admission, by the devices' routing policy).
 */
import { nowMs, type ExecutionTiming } from './channels/inference.js';
import { errors, type StowageError } from './errors.js';
import type { ModelSpec } from './model-spec.js';
import type { Backlog } from './backlog.js';

/** What admission reads and notes of a device's published backlog. */
export type AdmissionBacklog = Pick<Backlog, 'aheadMs' | 'noteSlack'>;

/** Weight of the newest execution in a model's moving average of its run time. */
const NEWEST = 0.2;

/** Priority levels as the scheduler resolves a request's: its own, else its model's, else the default. */
export interface Levels {
  defaultLevel: number;
  /** scheduler.models.<name>.priority, where set. */
  models: Readonly<Record<string, number>>;
}

export class DeadlineAdmission {
  readonly #levels: Levels;
  /** Each model's learned run time, ms. */
  readonly #runMs = new Map<string, number>();

  constructor(levels: Levels) {
    this.#levels = levels;
  }

  /** An execution a request of `model` rode in: its time joins the model's average. */
  learn(model: string, timing: ExecutionTiming): void {
    const ms = (timing.computeInputNs + timing.computeInferNs + timing.computeOutputNs) / 1e6;
    if (!(ms > 0)) return;
    const before = this.#runMs.get(model);
    this.#runMs.set(model, before === undefined ? ms : before + NEWEST * (ms - before));
  }

  /**
   * The refusal of a request for `model` at `priority` (0: its model's level: the node file's, else
   * its manifest's, else the default) due by `deadlineMs`, or null; `backlog` is that of the device
   * its lease leads to (none known: nothing waits ahead). Its slack is noted there as its
   * level's deadline guard (shared/backlog.ts) whether it is refused or not: the device keeps the
   * lower levels' batches short for it even while every request of its level is refused here.
   */
  refusal({ name: model, priority: manifestLevel }: Pick<ModelSpec, 'name' | 'priority'>, priority: number, deadlineMs: number, backlog: AdmissionBacklog | undefined, now = nowMs()): StowageError | null {
    if (!Number.isFinite(deadlineMs)) return null;
    const runMs = this.#runMs.get(model);
    if (runMs === undefined) return null;
    const level = priority || this.#levels.models[model] || manifestLevel || this.#levels.defaultLevel || 1;
    const leftMs = deadlineMs - now;
    backlog?.noteSlack(level, leftMs - runMs, now);
    const ahead = backlog?.aheadMs(level, now) ?? 0;
    if (ahead + runMs <= leftMs) return null;
    return errors.deadlineUnreachable(model, leftMs, ahead, runMs, level);
  }
}
