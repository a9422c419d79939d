/**
 * Requests whose inputs come from a preprocess hook (InferCommand.inputsFromHook), matched with
 * those inputs (HookInputs, through a hook thread's door) whichever comes first: the hook thread
 * may be quicker than its request's command, which goes at the end of its sender's turn. A request
 * joins the inbox when it has both; its queue time starts when the hook sent its inputs. A hook
 * that fails sends nothing, and the request's sender cancels it.
 *
 * A request is named as its sender numbers it: by its link (each door a number of its own,
 * `door`'s `link`) and its id on that link, since a hook thread
 * knows only what the sender told it (HookFeed). Each link numbers its requests in the order it
 * sends them, so inputs for an id at or below the link's last command whose request is not waiting
 * belong to one cancelled meanwhile: they are dropped, not kept as early.
 */
import type { HookInputs, InferCommand } from '../../shared/channels/device.js';
import type { InstanceKey } from '../../shared/model-spec.js';

const keyOf = (link: number, id: number) => `${link}:${id}`;

export interface HookFeedsEvents {
  /** A request has its inputs: it joins the inbox. */
  ready(cmd: InferCommand): void;
  /** A request is waiting for its inputs: its model's queue may be held for it (scheduler.expect). */
  expect(instance: InstanceKey): void;
  /** A request waited for stopped waiting (its inputs came, or it was withdrawn). */
  arrived(instance: InstanceKey): void;
}

export class HookFeeds {
  /** Requests waiting for their inputs, by link and id. */
  readonly #awaiting = new Map<string, InferCommand>();
  /** Their keys by the device's id (what a cancel names). */
  readonly #keys = new Map<number, string>();
  /** Inputs that came before their request. */
  readonly #early = new Map<string, HookInputs>();
  /** Each link's last command id. */
  readonly #last = new Map<number, number>();
  readonly #on: HookFeedsEvents;

  constructor(on: HookFeedsEvents) {
    this.#on = on;
  }

  /**
   * A request whose inputs a hook sends (`inputsFromHook`), come over `link` as `linkId` (`cmd.id`
   * is the device's id for it); a request with its inputs never comes here. Only these requests
   * move a link's last id: inputs are only ever sent for them, and a link numbers in order.
   */
  command(cmd: InferCommand, link: number, linkId: number): void {
    this.#last.set(link, linkId);
    const key = keyOf(link, linkId);
    const early = this.#early.get(key);
    if (early) {
      this.#early.delete(key);
      this.#on.ready(withInputs(cmd, early));
      return;
    }
    this.#awaiting.set(key, cmd);
    this.#keys.set(cmd.id, key);
    this.#on.expect(cmd.instance);
  }

  /** One request's inputs from a hook door; true when its request is now ready. */
  inputs(fed: HookInputs): boolean {
    const key = keyOf(fed.link, fed.id);
    const cmd = this.#awaiting.get(key);
    if (!cmd) {
      if (fed.id > (this.#last.get(fed.link) ?? 0)) this.#early.set(key, fed);
      return false;
    }
    this.#awaiting.delete(key);
    this.#keys.delete(cmd.id);
    this.#on.arrived(cmd.instance);
    this.#on.ready(withInputs(cmd, fed));
    return true;
  }

  /** Withdraw request `id` (the device's id) if it is waiting for its inputs; false when it is not. */
  cancel(id: number): boolean {
    const key = this.#keys.get(id);
    if (key === undefined) return false;
    const cmd = this.#awaiting.get(key)!;
    this.#awaiting.delete(key);
    this.#keys.delete(id);
    this.#on.arrived(cmd.instance); // withdrawn: its model's queue is not held for it
    return true;
  }

  /**
   * A link closed (an edge's door): inputs that came early for it are dropped; its waiting requests are cancelled by
   * its close.
   */
  forgetLink(link: number): void {
    const prefix = `${link}:`;
    for (const key of this.#early.keys()) if (key.startsWith(prefix)) this.#early.delete(key);
    this.#last.delete(link);
  }

  /** Requests waiting for inputs, and inputs waiting for requests (for tests and leaks). */
  get size(): { awaiting: number; early: number } {
    return { awaiting: this.#awaiting.size, early: this.#early.size };
  }
}

function withInputs(cmd: InferCommand, { inputs, sentAtMs }: HookInputs): InferCommand {
  return { ...cmd, inputs, inputsFromHook: false, enqueuedAtMs: sentAtMs };
}
