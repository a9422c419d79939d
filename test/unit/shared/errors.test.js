import { readFileSync } from 'node:fs';
import test from 'ava';
import { ERROR_CODES, errorToStatus, errors, fromErrorData, Status, StowageError, toErrorData } from '../../../dist/shared/errors.js';
import { ROOT } from '../../helpers/server.js';

test('every error code is documented in docs/operations.md with its status', (t) => {
  const readme = readFileSync(`${ROOT}/docs/operations.md`, 'utf8');
  const statusName = Object.fromEntries(Object.entries(Status).map(([k, v]) => [v, k]));
  for (const [code, { status }] of Object.entries(ERROR_CODES)) {
    t.regex(readme, new RegExp(`\\| \`${code}\` \\| \`${statusName[status]}\` \\|`), code);
  }
});

test('errors cross threads as plain data and come back with code, status and both stacks', (t) => {
  const original = errors.invalidTensor('input "x": bad');
  const data = structuredClone(toErrorData(original));
  const rebuilt = fromErrorData(data);
  t.true(rebuilt instanceof StowageError);
  t.is(rebuilt.code, 'STOWAGE_INVALID_TENSOR');
  t.is(rebuilt.status, Status.INVALID_ARGUMENT);
  t.is(rebuilt.message, 'input "x": bad');
  t.true(rebuilt.stack?.includes('from another thread'));
});

test('anything that is not a StowageError maps to INTERNAL', (t) => {
  t.deepEqual(errorToStatus(errors.modelNotFound('x', ['a'])), { code: Status.NOT_FOUND, details: 'unknown model "x"; the repository serves: a' });
  t.deepEqual(errorToStatus(new TypeError('boom')), { code: Status.INTERNAL, details: 'internal error: boom' });
  t.is(toErrorData('text').code, 'STOWAGE_INTERNAL');
  t.is(fromErrorData({ code: /** @type {any} */ ('NOT_A_CODE'), message: 'm' }).code, 'STOWAGE_INTERNAL', 'a code from another version of the channel');
});

test('refusals an overloaded server answers in bulk carry no stack (capturing one costs the CPU admitted requests need); other errors do', (t) => {
  const refusal = errors.quotaExceeded('tenant "a"', '1 requests in flight', 'global.quotas.tenants.a.max_inflight');
  t.is(refusal.code, 'STOWAGE_QUOTA_EXCEEDED');
  t.notRegex(refusal.stack ?? '', /\n\s+at /);
  t.regex(errors.invalidTensor('input "x": bad').stack ?? '', /\n\s+at /);
  t.regex(new Error('after a refusal').stack ?? '', /\n\s+at /, 'the stack limit is restored');
});
