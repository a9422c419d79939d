// The errors tests catch, typed as what they are: a call through gRPC fails with a ServiceError
// (`code` a status number, `details` the server's message); a call into the server's own code
// fails with a StowageError (`code` a string such as STOWAGE_QUEUE_FULL, `status` the gRPC status).
import { StowageError } from '../../dist/shared/errors.js';

/** @typedef {import('@grpc/grpc-js').ServiceError} ServiceError */

/**
 * The gRPC error `promise` rejects with; fails the test if it resolves or fails otherwise.
 * @param {import('ava').ExecutionContext} t
 * @param {PromiseLike<unknown>} promise
 * @param {string} [message]
 * @returns {Promise<ServiceError>}
 */
export async function grpcError(t, promise, message) {
  const err = /** @type {ServiceError} */ (await t.throwsAsync(promise, undefined, message));
  t.is(typeof err.code, 'number', `a gRPC status, not ${err.message}`);
  return err;
}

/**
 * The StowageError `promise` rejects with; fails the test otherwise.
 * @param {import('ava').ExecutionContext} t
 * @param {PromiseLike<unknown>} promise
 * @param {string} [message]
 * @returns {Promise<StowageError>}
 */
export async function stowageError(t, promise, message) {
  return t.throwsAsync(promise, { instanceOf: StowageError }, message);
}

/**
 * The StowageError `fn` throws; fails the test otherwise.
 * @param {import('ava').ExecutionContext} t
 * @param {() => unknown} fn
 * @param {string} [message]
 * @returns {StowageError}
 */
export function stowageThrows(t, fn, message) {
  return t.throws(fn, { instanceOf: StowageError }, message);
}
