/**
 * Host RAM for weights, shared by every device actor of the process: one
 * SharedArrayBuffer per distinct tensor (by content key), held on the main
 * thread for as long as a loaded model version keeps its weights in host RAM
 * (residency `system` or `device`). Device actors get these buffers with each
 * load (posting a SharedArrayBuffer shares it, no copy), copy from them into
 * their arenas, and hand back the buffers they had to read from disk. So with
 * four devices, or fifty fine-tuned variants of one backbone, each distinct
 * tensor is in host RAM once.
 */
import type { HostUpdate } from '../shared/channels/device.js';
import type { InstanceKey } from '../shared/model-spec.js';

export class HostWeights {
  /** By content key: the buffer and the instances holding it. */
  #tensors = new Map<string, { buffer: SharedArrayBuffer; users: Set<InstanceKey> }>();
  /** By instance: the content keys it holds. */
  #holdings = new Map<InstanceKey, string[]>();

  /** Every buffer held now: what a device actor may use instead of reading the disk. */
  offer(): Record<string, SharedArrayBuffer> {
    const offer: Record<string, SharedArrayBuffer> = {};
    for (const [key, t] of this.#tensors) offer[key] = t.buffer;
    return offer;
  }

  /** The keys of every tensor held now (the compiler does not read these again). */
  keys(): string[] {
    return [...this.#tensors.keys()];
  }

  /**
   * Take in what was read into host RAM (by the compiler or a device actor) and which tensors
   * each instance now holds. A buffer nobody holds is not kept (an `unpinned` model's, say).
   */
  update(update: HostUpdate): void {
    const created = Object.entries(update.created).filter(([key]) => !this.#tensors.has(key));
    for (const [key, buffer] of created) this.#tensors.set(key, { buffer, users: new Set() });
    for (const { instance, keys } of update.holdings) this.#hold(instance, keys);
    for (const [key] of created) if (this.#tensors.get(key)?.users.size === 0) this.#tensors.delete(key);
  }

  /** The instance is gone from every device: its tensors stay only for other users. */
  release(instance: InstanceKey): void {
    this.#hold(instance, []);
    this.#holdings.delete(instance);
  }

  /** Bytes held: each distinct tensor once. */
  get bytes(): number {
    let sum = 0;
    for (const t of this.#tensors.values()) sum += t.buffer.byteLength;
    return sum;
  }

  get tensors(): number {
    return this.#tensors.size;
  }

  #hold(instance: InstanceKey, keys: readonly string[]): void {
    // Take the new holdings before letting go of the old, so a tensor kept in both never drops out.
    for (const key of keys) this.#tensors.get(key)?.users.add(instance);
    const kept = new Set(keys);
    for (const key of this.#holdings.get(instance) ?? []) {
      if (kept.has(key)) continue;
      const t = this.#tensors.get(key);
      t?.users.delete(instance);
      if (t && t.users.size === 0) this.#tensors.delete(key);
    }
    this.#holdings.set(instance, [...keys]);
  }
}
