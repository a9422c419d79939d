// CPU time of a server process, read from /proc (Linux): what a request costs the machine, which
// on a shared, noisy box compares better between runs than requests per second do.
import { readdirSync, readFileSync } from 'node:fs';

const TICK_US = 1e6 / 100; // /proc reports CPU in clock ticks of 10 ms (USER_HZ = 100 on Linux)

/** CPU µs used so far by a process and by its main thread (the thread whose id is the pid). */
export function cpuUs(pid) {
  const ticks = (file) => {
    const fields = readFileSync(file, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US; // utime, stime
  };
  return { process: ticks(`/proc/${pid}/stat`), main: ticks(`/proc/${pid}/task/${pid}/stat`) };
}

/**
 * CPU µs used so far by a process and every process below it (a server whose work runs in child
 * processes: Triton's Python stubs, MLServer's inference workers). Children that have exited and
 * been waited for are in the parent's cutime/cstime.
 */
export function treeCpuUs(pid) {
  const stats = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const fields = readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1].split(' ');
      stats.set(Number(entry), { ppid: Number(fields[1]), us: (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * TICK_US });
    } catch {
      // gone meanwhile
    }
  }
  let total = 0;
  const pending = [pid];
  while (pending.length) {
    const p = pending.pop();
    total += stats.get(p)?.us ?? 0;
    for (const [child, s] of stats) if (s.ppid === p) pending.push(child);
  }
  return total;
}

/** Busy and total CPU time of the whole machine so far, in µs (/proc/stat, all cores). */
export function machineCpu() {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number);
  const idle = fields[3] + fields[4]; // idle, iowait
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: (total - idle) * TICK_US, total: total * TICK_US };
}
