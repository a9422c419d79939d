/**
 * Node discovery by DNS: a name resolved every interval to all its addresses, as a Kubernetes
 * headless Service answers (one A or AAAA record per ready pod). Each resolution that differs
 * from the last reports the addresses that appeared and those that went; the gateway adds and
 * drains nodes accordingly.
 *
 * A name that does not exist, or has no address (NXDOMAIN, NODATA: a headless Service with no
 * ready pod), is an empty set; a resolver that fails (timeout, refused) changes nothing, so a
 * DNS hiccup never drops healthy nodes.
 */
import { Resolver } from 'node:dns/promises';
import type { Logger } from 'pino';

export interface DiscoveryOptions {
  dnsName: string;
  /** The nodes' gRPC port: every address becomes address:port. */
  port: number;
  intervalMs: number;
  /** A DNS server (host:port) to ask; empty: the system's. */
  resolver: string;
  logger: Logger;
  onChange: (added: readonly string[], removed: readonly string[]) => void;
}

/** Codes c-ares gives when the name authoritatively has no address. */
const NO_ADDRESS = new Set(['ENOTFOUND', 'ENODATA']);

export class DnsDiscovery {
  readonly #o: DiscoveryOptions;
  readonly #resolver = new Resolver({ timeout: 2000, tries: 2 });
  #current = new Set<string>();
  #timer?: NodeJS.Timeout;
  #failing = false;
  #busy = false;

  constructor(options: DiscoveryOptions) {
    this.#o = options;
    if (options.resolver) this.#resolver.setServers([options.resolver]);
  }

  /** Resolve once now, then every interval. */
  async start(): Promise<void> {
    await this.resolve();
    this.#timer = setInterval(() => void this.resolve(), this.#o.intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#resolver.cancel();
  }

  async #lookup(rrtype: 'A' | 'AAAA'): Promise<string[]> {
    try {
      const found = rrtype === 'A' ? await this.#resolver.resolve4(this.#o.dnsName) : await this.#resolver.resolve6(this.#o.dnsName);
      return found.map((a) => (rrtype === 'A' ? `${a}:${this.#o.port}` : `[${a}]:${this.#o.port}`));
    } catch (err) {
      if (NO_ADDRESS.has((err as NodeJS.ErrnoException).code ?? '')) return [];
      throw err;
    }
  }

  /** One resolution; reports what changed. One at a time: a slow resolver never stacks them up. */
  async resolve(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      await this.#resolveOnce();
    } finally {
      this.#busy = false;
    }
  }

  async #resolveOnce(): Promise<void> {
    let found: string[];
    try {
      const [v4, v6] = await Promise.all([this.#lookup('A'), this.#lookup('AAAA')]);
      found = [...v4, ...v6];
    } catch (err) {
      if (!this.#failing) {
        this.#o.logger.warn({ dns_name: this.#o.dnsName, err: (err as Error).message }, 'node discovery: DNS does not answer; keeping the nodes found before');
      }
      this.#failing = true;
      return;
    }
    if (this.#failing) this.#o.logger.info({ dns_name: this.#o.dnsName }, 'node discovery: DNS answers again');
    this.#failing = false;
    const next = new Set(found);
    const added = found.filter((a) => !this.#current.has(a));
    const removed = [...this.#current].filter((a) => !next.has(a));
    this.#current = next;
    if (added.length || removed.length) this.#o.onChange(added, removed);
  }
}
