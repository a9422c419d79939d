/**
 * Triton's LogSettings RPC mapped onto the process logger's level. Triton has
 * three switches and a verbosity; pino has one ordered level. The switches
 * are read as "lowest level shown": verbose 1 shows debug, 2 or more trace;
 * otherwise info, warning, error in that order; none of them silences the log.
 * Logs always go to stdout as JSON: `log_file` accepts only "" and
 * `log_format` only "default".
 */
import type { Logger } from 'pino';
import { errors, quote } from '../shared/errors.js';
import type { LogSettingValue } from '../shared/operations.js';

interface Switches {
  log_info: boolean;
  log_warning: boolean;
  log_error: boolean;
  log_verbose_level: number;
}

const SETTINGS = ['log_file', 'log_info', 'log_warning', 'log_error', 'log_verbose_level', 'log_format'] as const;

function switchesOf(level: string): Switches {
  const order = ['trace', 'debug', 'info', 'warn', 'error'];
  const at = order.indexOf(level); // -1 for fatal and silent: nothing Triton can name is shown
  const shows = (l: string) => at >= 0 && at <= order.indexOf(l);
  return {
    log_info: shows('info'),
    log_warning: shows('warn'),
    log_error: shows('error'),
    log_verbose_level: level === 'trace' ? 2 : level === 'debug' ? 1 : 0,
  };
}

function levelOf(s: Switches): string {
  if (s.log_verbose_level >= 2) return 'trace';
  if (s.log_verbose_level === 1) return 'debug';
  if (s.log_info) return 'info';
  if (s.log_warning) return 'warn';
  if (s.log_error) return 'error';
  return 'silent';
}

/** What kind of value each setting takes: the switches a bool, the verbosity a uint32, file and format a string. */
type SettingKind = 'bool' | 'uint32' | 'string';

/** The kind of a given value, as LogSettings names them (a whole number from 0 is a uint32). */
function kindOf(v: LogSettingValue): SettingKind | 'number' {
  if (typeof v === 'boolean') return 'bool';
  if (typeof v === 'string') return 'string';
  return Number.isInteger(v) && v >= 0 && v <= 0xffffffff ? 'uint32' : 'number';
}

function value(key: string, v: LogSettingValue, want: SettingKind): LogSettingValue {
  const got = kindOf(v);
  if (got !== want) throw errors.invalidRequest(`log setting ${key} takes a ${want} value, got a ${got} (${JSON.stringify(v)})`);
  return v;
}

/** The current settings, each its value. */
export function currentLogSettings(logger: Logger): Record<string, LogSettingValue> {
  const s = switchesOf(logger.level);
  return { log_file: '', log_info: s.log_info, log_warning: s.log_warning, log_error: s.log_error, log_verbose_level: s.log_verbose_level, log_format: 'default' };
}

/** Apply a LogSettings request (all or nothing) and return the settings now in force. */
export function applyLogSettings(logger: Logger, settings: Record<string, LogSettingValue>): Record<string, LogSettingValue> {
  const next = switchesOf(logger.level);
  for (const [key, v] of Object.entries(settings)) {
    switch (key) {
      case 'log_info':
      case 'log_warning':
      case 'log_error':
        next[key] = value(key, v, 'bool') as boolean;
        break;
      case 'log_verbose_level':
        next.log_verbose_level = value(key, v, 'uint32') as number;
        break;
      case 'log_file':
        if (value(key, v, 'string') !== '') throw errors.unsupported('log_file: logs go to stdout as JSON lines; redirect stdout to keep them in a file');
        break;
      case 'log_format':
        if (value(key, v, 'string') !== 'default') throw errors.unsupported('log_format: the only format is "default" (pino JSON lines)');
        break;
      default:
        throw errors.invalidRequest(`unknown log setting ${quote(key)}; known settings: ${SETTINGS.join(', ')}`);
    }
  }
  const level = levelOf(next);
  if (level !== logger.level) {
    logger.info({ from: logger.level, to: level }, 'log level changed by LogSettings');
    logger.level = level;
  }
  return currentLogSettings(logger);
}
