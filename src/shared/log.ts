/** The process logger: pino JSON lines on stdout, one logger shared by the main thread's modules. */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string): Logger {
  return pino({ level, base: { pid: process.pid } });
}
