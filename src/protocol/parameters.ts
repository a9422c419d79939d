/**
 * A request's parameters, read alike whichever protocol carried them. Each edge turns its own
 * form into `ParameterValues` in one step (gRPC's `InferParameter` oneofs in codec.ts, REST's JSON
 * values in rest-tensors.ts); what they mean to the data plane is read here, once: sequences
 * refused, the priority and the timeout checked, Triton's `shared_memory_*` parameters as a
 * region reference, classification refused, and everything as the plain values hooks see.
 *
 * An integer keeps every digit as a bigint (gRPC's int64 and uint64 come as decimal strings; a
 * JSON whole number is one), so "a whole number" is a question of type, not of value: gRPC's
 * `double_param: 2` is a double, as Triton reads it.
 */
import { errors, quote } from '../shared/errors.js';
import type { DataPlaneRequest, PlainParameters, RegionRef, RequestOutput } from '../shared/data-plane.js';
import { MAX_TIMER_MS } from '../shared/timers.js';
import { MAX_PRIORITY_LEVELS } from '../shared/constants.js';

/**
 * One parameter's value: integers as bigint (every digit kept), doubles as number; null: named, but without a value
 * (gRPC's oneof left unset).
 */
export type ParameterValue = boolean | string | number | bigint | null;

/**
 * A message's parameters by name, in an object without a prototype (a parameter named "__proto__" is one like any
 * other).
 */
export type ParameterValues = Record<string, ParameterValue>;

/** An empty set of parameters, without a prototype. */
export function noParameters(): ParameterValues {
  return Object.create(null) as ParameterValues;
}

/** How a parameter's value is shown in an error: its type and its value, cut short like any client string. */
function shown(value: ParameterValue): string {
  if (value === null) return 'no value';
  if (typeof value === 'bigint') return `the integer ${value}`;
  if (typeof value === 'number') return `the double ${value}`;
  if (typeof value === 'boolean') return `the boolean ${value}`;
  return `the string ${quote(value)}`;
}

/** Parameters as plain values (what hooks see in their context): integers as numbers; one without a value left out. */
export function plainParameters(values: ParameterValues): PlainParameters {
  const plain: PlainParameters = {};
  for (const [key, value] of Object.entries(values)) {
    if (value !== null) plain[key] = typeof value === 'bigint' ? Number(value) : value;
  }
  return plain;
}

/**
 * A request's own parameters, read as Triton reads them: sequences refused, a priority that is not
 * an unsigned integer refused, the timeout in microseconds; and all of them as plain values. Both
 * protocols' decoders spread what this returns into their request, so a field added here reaches
 * the data plane from gRPC and REST alike.
 */
export function requestParameters(values: ParameterValues): Pick<DataPlaneRequest, 'parameters' | 'timeoutUs' | 'priority'> {
  const { sequence_id: sequence, sequence_start: start, sequence_end: end, priority, timeout } = values;
  // A sequence is named by a non-zero integer or a non-empty string (Triton's two forms).
  const inSequence = (typeof sequence === 'bigint' && sequence !== 0n) || (typeof sequence === 'string' && sequence !== '');
  if (inSequence || start === true || end === true) {
    throw errors.unsupported('sequence_id/sequence_start/sequence_end: this server has no sequence batching; send independent requests');
  }
  // Triton's request priority: a level the device's scheduler serves in order (scheduler.ts; one
  // above scheduler.priority_levels is refused there); one that is not an unsigned integer is
  // refused here as Triton refuses it.
  if (priority !== undefined && !(typeof priority === 'bigint' && priority >= 0n)) {
    throw errors.invalidRequest(`parameter "priority" must be an unsigned integer (uint64_param), got ${shown(priority)}`);
  }
  const parameters = plainParameters(values);
  // 0 (or none) is the model's default level; above MAX_PRIORITY_LEVELS it names no level any node
  // file can give, refused here with the value as sent (the device refuses one above its own levels).
  if (typeof priority === 'bigint' && priority > BigInt(MAX_PRIORITY_LEVELS)) {
    throw errors.invalidRequest(`parameter "priority" ${priority} is above every priority level (scheduler.priority_levels is at most ${MAX_PRIORITY_LEVELS}): give 1 (the highest) to the server's levels, or 0 for the model's default`);
  }
  const level = typeof priority === 'bigint' && priority > 0n ? Number(priority) : 0;
  const read = level > 0 ? { parameters, priority: level } : { parameters };
  if (timeout === undefined) return read;
  if (!(typeof timeout === 'bigint' && timeout >= 0n)) {
    throw errors.invalidRequest(`parameter "timeout" must be a non-negative int64 (microseconds), got ${shown(timeout)}`);
  }
  // Past what one timer holds (2^31-1 ms, about 24.8 days, the node file's longest duration too)
  // a timeout means no timeout: the request waits as one without, under the queue bound.
  const us = Number(timeout);
  return us > 0 && us / 1000 <= MAX_TIMER_MS ? { ...read, timeoutUs: us } : read;
}

/**
 * Triton's shared_memory_* parameters of one input or output (`kind`, named `name`), as a region
 * reference; null when it uses none. The tensor is quoted only in an error: this runs for every
 * tensor of every request.
 */
export function sharedMemoryRef(kind: 'input' | 'output', name: string, values: ParameterValues): RegionRef | null {
  const { shared_memory_region: region, shared_memory_byte_size: size, shared_memory_offset: offset } = values;
  if (region === undefined && size === undefined && offset === undefined) return null;
  const what = `${kind} ${quote(name)}`;
  if (typeof region !== 'string') {
    throw errors.invalidRequest(`${what}: shared_memory_region must be a string parameter naming a registered region`);
  }
  const integer = (key: string, value: ParameterValue | undefined, fallback?: number): number => {
    if (value === undefined) {
      if (fallback !== undefined) return fallback;
      throw errors.invalidRequest(`${what}: ${key} is required with shared_memory_region`);
    }
    if (typeof value !== 'bigint' || value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER)) {
      throw errors.invalidRequest(`${what}: ${key} must be a non-negative int64 parameter`);
    }
    return Number(value);
  };
  return { kind: 'region', region, byteSize: integer('shared_memory_byte_size', size), offset: integer('shared_memory_offset', offset, 0) };
}

/** A requested output: its region, if any; classification refused (an extension this server lacks). */
export function requestedOutput(name: string, values: ParameterValues): RequestOutput {
  if ('classification' in values) {
    throw errors.unsupported(`output ${quote(name)} asks for classification, an extension this server does not provide; request the raw output`);
  }
  return { name, region: sharedMemoryRef('output', name, values) };
}
