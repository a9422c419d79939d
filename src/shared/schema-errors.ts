/**
 * ajv's errors, rewritten for people: one line per problem naming the key
 * path, the value found and what is allowed. Shared by the node file and the
 * bundle manifests.
 */
import type { ErrorObject } from 'ajv';
import { MAX_TIMER_SECONDS } from './timers.js';

interface SchemaNode {
  properties?: Record<string, unknown>;
}

function keyPathOf(err: ErrorObject): string {
  const parts = err.instancePath.split('/').filter(Boolean).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  return parts.length ? parts.join('.') : '(top level)';
}

function valueAt(doc: unknown, err: ErrorObject): unknown {
  let node = doc;
  for (const p of err.instancePath.split('/').filter(Boolean)) node = (node as Record<string, unknown>)?.[p];
  return node;
}

/** One line per problem: key path, the value found, what is allowed. Needs ajv's `verbose: true` (parentSchema). */
export function describeSchemaErrors(errs: readonly ErrorObject[], doc: unknown): string {
  return errs.map((e) => {
    const at = keyPathOf(e);
    const got = JSON.stringify(valueAt(doc, e));
    switch (e.keyword) {
      case 'additionalProperties': {
        const key = (e.params as { additionalProperty: string }).additionalProperty;
        const allowed = Object.keys((e.parentSchema as SchemaNode).properties ?? {}).join(', ');
        return `${at === '(top level)' ? '' : `${at}.`}${key}: unknown key; allowed here: ${allowed}`;
      }
      case 'enum':
        return `${at}: ${got} is not allowed; expected one of ${(e.params as { allowedValues: unknown[] }).allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
      case 'maximum': {
        // A duration past what a timer can hold ("never" written as a huge number) says why it is refused.
        const timer = (e.params as { limit: number }).limit === MAX_TIMER_SECONDS;
        return `${at}: ${got} ${e.message ?? 'is too large'}${timer ? ' (seconds: about 24.8 days, the longest a timer can wait)' : ''}`;
      }
      case 'required':
        return `${at}: missing required key ${(e.params as { missingProperty: string }).missingProperty}`;
      default:
        return `${at}: ${got} ${e.message ?? 'is invalid'}`;
    }
  }).join('\n');
}
