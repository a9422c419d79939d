/**
 * The Stowage error code (shared/errors.ts, e.g. STOWAGE_QUEUE_FULL) of a failed call, carried in
 * its gRPC trailers beside the status. Several codes share one status (RESOURCE_EXHAUSTED is a full
 * queue, a busy server, a quota or a device out of memory), and whoever acts on a failure needs to
 * know which: a gateway retries a full node's refusal on another holder, never a quota's. Reading
 * the message instead would tie callers to its wording.
 */
import type * as grpc from '@grpc/grpc-js';
import { ERROR_CODES, type ErrorCode } from '../shared/errors.js';

/** The trailer key (lower case, as gRPC sends keys). */
export const ERROR_CODE_KEY = 'stowage-error-code';

/** The Stowage code a failed call's trailers name; undefined when they name none or one unknown here. */
export function errorCodeOf(err: { metadata?: grpc.Metadata }): ErrorCode | undefined {
  const value = err.metadata?.get(ERROR_CODE_KEY)[0];
  return typeof value === 'string' && value in ERROR_CODES ? (value as ErrorCode) : undefined;
}
