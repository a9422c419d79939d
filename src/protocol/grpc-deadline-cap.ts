/**
 * Client deadlines past what a timer can hold. grpc-js (1.14) reads a call's `grpc-timeout`
 * header as `(value × unit) | 0` milliseconds and arms a timer with it: a deadline more than
 * 2^31−1 ms (about 24.8 days) away wraps to a negative number and the call fails
 * DEADLINE_EXCEEDED at once (a client writing "never" as 30 days). Before grpc-js sees a stream's
 * headers, Node's `http2.server.stream.created` diagnostics channel hands them to us: a timeout
 * longer than a timer holds is cut to the longest one does, which no call will notice.
 */
import diagnostics from 'node:diagnostics_channel';
import { MAX_TIMER_MS, MAX_TIMER_SECONDS } from '../shared/timers.js';

const CHANNEL = 'http2.server.stream.created';

/** gRPC's TimeoutValue: up to 8 digits and a unit (PROTOCOL-HTTP2.md). */
const TIMEOUT = /^\s*(\d{1,8})\s*([HMSmun])\s*$/;
const UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** A `grpc-timeout` value as one timer holds it: the value itself when it fits, else the longest that does. */
export function cappedTimeout(value: string): string {
  const match = TIMEOUT.exec(value);
  if (!match) return value; // grpc-js refuses it itself, saying so
  return Number(match[1]) * UNIT_MS[match[2]] > MAX_TIMER_MS ? `${MAX_TIMER_SECONDS}S` : value;
}

let capping = false;

/** Cap every gRPC server stream's deadline on this thread from now on (once per thread is enough). */
export function capGrpcDeadlines(): void {
  if (capping) return;
  capping = true;
  diagnostics.subscribe(CHANNEL, (message) => {
    const { headers } = message as { headers?: Record<string, string | string[] | undefined> };
    const timeout = headers?.['grpc-timeout'];
    if (typeof timeout === 'string') headers!['grpc-timeout'] = cappedTimeout(timeout);
  });
}
