/**
 * Each loaded instance's lease slot (shared/leases.ts), and the routes every thread that holds
 * requests runs models' requests by (actors/rooms/rooms.ts), on the main thread. Each instance
 * that serves a model gets a slot under a tag of its own, where every such thread counts the
 * requests it holds on it, each in its row. A model's route names that slot and tag. When the
 * model's record changes (a reload, an unload), the slots of the instances no longer serving it
 * are closed at once, before anyone is told, so no
 * thread takes a new lease on them; an unload or the end of a reload then waits for the leases
 * still held (`drained`), each last release on a closed slot saying so (`released`: an edge's
 * through a message, the main thread's rooms at once), and the slot is free for another instance.
 *
 * The model registry (model-registry.ts) owns the records and tells this of each change.
 */
import type { Leases } from '../shared/leases.js';
import { modelOf, type InstanceKey, type ModelSpec } from '../shared/model-spec.js';
import type { EdgeRoute } from '../shared/channels/edge.js';

interface Slot {
  slot: number;
  tag: number;
  /** New leases may be taken on it. */
  open: boolean;
}

/** What a route is made of: the model's serving instance and its spec, when it is ready. */
export interface Serving {
  instance: InstanceKey;
  spec: ModelSpec;
}

export class ModelSlots {
  readonly #leases: Leases;
  readonly #slots = new Map<InstanceKey, Slot>();
  #nextTag = 1;
  /** Told when a slot is freed (its leases drained), before it may stand for another instance. */
  readonly #slotFreed: ((instance: InstanceKey, slot: number) => void) | null;
  /** Drains waiting for leases on a closed slot to be given back. */
  #waiting: (() => void)[] = [];

  /** `leases`: the main thread's (Leases.create), whose last row is this thread's. */
  constructor(leases: Leases, slotFreed?: (instance: InstanceKey, slot: number) => void) {
    this.#leases = leases;
    this.#slotFreed = slotFreed ?? null;
  }

  /**
   * Model `name` is now served by `serving` (undefined: not ready, or gone): every other instance
   * of it is closed to new leases at once (the state word is cleared before this returns), the
   * serving one has an open slot. Its route now, for the edges to be told.
   */
  changed(name: string, serving: Serving | undefined): EdgeRoute | null {
    for (const [instance, s] of this.#slots) {
      if (s.open && instance !== serving?.instance && modelOf(instance) === name) {
        this.#leases.close(s.slot);
        s.open = false;
      }
    }
    if (serving && !this.#slots.get(serving.instance)?.open) {
      const slot = this.#slots.get(serving.instance)?.slot ?? this.#leases.take();
      const s = { slot, tag: this.#nextTag++, open: true };
      this.#slots.set(serving.instance, s);
      this.#leases.open(slot, s.tag);
    }
    return this.routeOf(name, serving);
  }

  /** The model's route when `serving` serves it, or null: it is not ready. */
  routeOf(name: string, serving: Serving | undefined): EdgeRoute | null {
    if (!serving) return null;
    const s = this.#slots.get(serving.instance);
    return s?.open ? { model: name, spec: serving.spec, instance: serving.instance, slot: s.slot, tag: s.tag } : null;
  }

  /** Every slot in use (open, or closed and not yet drained), and the instance it stands for. */
  *slots(): IterableIterator<[InstanceKey, number]> {
    for (const [instance, s] of this.#slots) yield [instance, s.slot];
  }

  /** Leases held on each instance with a slot, every thread's together. */
  *held(): IterableIterator<[InstanceKey, number]> {
    for (const [instance, s] of this.#slots) yield [instance, this.#leases.held(s.slot)];
  }

  /** Resolves once no lease is held on the instance's slot (closed already); the slot is then free. */
  async drained(instance: InstanceKey): Promise<void> {
    const s = this.#slots.get(instance);
    if (!s) return;
    // The last release on the closed slot says so (`released`), as does an edge's death.
    while (this.#leases.held(s.slot) > 0) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    // Closed and drained: the slot may stand for another instance (under another tag).
    if (!s.open && this.#slots.get(instance) === s) {
      this.#slots.delete(instance);
      this.#slotFreed?.(instance, s.slot);
      this.#leases.give(s.slot);
    }
  }

  /**
   * Leases were given back (the last on a closed slot, or an edge died): whoever waits for a slot to drain looks again.
   */
  released(): void {
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const resolve of waiting) resolve();
  }
}
