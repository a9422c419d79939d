/**
 * Fault injection for the tests of a device actor's crash recovery and supervision
 * (test/adversarial/faults.test.js, test/adversarial/supervision.test.js), each armed by a file
 * whose path an environment variable names. Unset (production), each costs one test of a constant.
 *
 * - STOWAGE_FAULT_DEVICE_EXIT: when the file exists as a batch is about to run, the thread removes
 *   it and exits (code 70), as a fault in a kernel would end it, with the batch and the queues in
 *   flight; a test creates the file once to get exactly one crash.
 * - STOWAGE_FAULT_DEVICE_HOLD_LOADS: while the file exists, each load is held before it starts (a
 *   replacement worker slow to load its models again, so that a test can act on a device
 *   mid-restart), and a device exit armed meanwhile is taken there.
 * - STOWAGE_FAULT_DEVICE_NO_START: when the file exists as the thread starts, it takes it (removes
 *   it: one worker only) and never says it started, as a worker stuck loading its libraries would.
 */
import { existsSync, rmSync } from 'node:fs';

const exitFile = process.env.STOWAGE_FAULT_DEVICE_EXIT;
const holdLoadsFile = process.env.STOWAGE_FAULT_DEVICE_HOLD_LOADS;
const noStartFile = process.env.STOWAGE_FAULT_DEVICE_NO_START;

/** Whether a test may make this thread exit before a batch (the file's test is made only then). */
export const exitArmed = exitFile !== undefined;

/** Exit now if the test asked for it (STOWAGE_FAULT_DEVICE_EXIT's file exists). */
export function exitIfAsked(): void {
  if (exitFile && existsSync(exitFile)) {
    rmSync(exitFile, { force: true });
    process.exit(70);
  }
}

/** Whether loads may be held (STOWAGE_FAULT_DEVICE_HOLD_LOADS is set). */
export const loadsMayBeHeld = holdLoadsFile !== undefined;

/** Hold a load while the test's file exists, taking an exit armed meanwhile; `held` is told once if it holds. */
export async function holdLoad(held: () => void): Promise<void> {
  if (holdLoadsFile && existsSync(holdLoadsFile)) held();
  while (holdLoadsFile && existsSync(holdLoadsFile)) {
    exitIfAsked();
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Whether this thread must never say it started (STOWAGE_FAULT_DEVICE_NO_START's file exists; taken now). */
export function neverStart(): boolean {
  if (!noStartFile || !existsSync(noStartFile)) return false;
  rmSync(noStartFile, { force: true });
  return true;
}
