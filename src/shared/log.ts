/** The process logger: pino JSON lines on stdout, one logger shared by the main thread's modules. */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string): Logger {
  // Written synchronously: nothing is ever buffered, so nothing is left to flush at exit. pino's
  // default asynchronous stdout flushes at exit with sonic-boom's flushSync, which retries a
  // failed write forever: once nothing reads stdout (a log shipper or parent that died) a
  // SIGTERM never ends the process. A write that fails with EPIPE turns logging off instead
  // (pino's broken-pipe filter). No request is logged on the request path, so this costs no
  // throughput; logging stalls only while a live reader stops reading, as any process's would.
  return pino({ level, base: { pid: process.pid } }, pino.destination({ dest: 1, sync: true }));
}
