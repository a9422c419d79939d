/** Triton's reasons for a failed request (nv_inference_request_failure's `reason` label). */
import type { ErrorCode } from './errors.js';

export const FAILURE_REASONS = ['REJECTED', 'CANCELED', 'BACKEND', 'OTHER'] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

export function failureReason(code: ErrorCode | undefined): FailureReason {
  switch (code) {
    case 'STOWAGE_QUEUE_FULL':
    case 'STOWAGE_SERVER_BUSY':
    case 'STOWAGE_QUOTA_EXCEEDED':
    case 'STOWAGE_DEADLINE_EXCEEDED':
      return 'REJECTED';
    case 'STOWAGE_CANCELLED':
      return 'CANCELED';
    case 'STOWAGE_EXECUTION_FAILED':
      return 'BACKEND';
    default:
      return 'OTHER';
  }
}
