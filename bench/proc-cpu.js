// CPU time of a server process, read from /proc (Linux): what a request costs the machine, which
// on a shared, noisy box compares better between runs than requests per second do; and its
// resident memory, for the density benchmark.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';

const TICK_US = 1e6 / 100; // /proc reports CPU in clock ticks of 10 ms (USER_HZ = 100 on Linux)
const PAGE_BYTES = 4096; // and memory in pages (4 KiB on x86-64 Linux)

/** CPU µs used so far by a process and by its main thread (the thread whose id is the pid). */
export function cpuUs(pid) {
  const ticks = (file) => {
    const fields = readFileSync(file, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US; // utime, stime
  };
  return { process: ticks(`/proc/${pid}/stat`), main: ticks(`/proc/${pid}/task/${pid}/stat`) };
}

/**
 * CPU µs used so far by each kind of thread of a process, by the thread's name (/proc's comm:
 * Node's MainThread, a worker named by its `name` option such as the gateway's placement thread,
 * V8's helpers, which run garbage collection and compilation beside the JavaScript threads, as V8Worker).
 */
export function threadCpuUs(pid) {
  const byName = new Map();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
      byName.set(name, (byName.get(name) ?? 0) + (Number(fields[11]) + Number(fields[12])) * TICK_US);
    } catch {
      // gone meanwhile
    }
  }
  return byName;
}

/**
 * Every process's figures from /proc/<pid>/stat, summed over `pid` and every process below it (a
 * server whose work runs in child processes: Triton's Python stubs, MLServer's inference workers).
 * `figure(fields)` reads one process's figure from its stat fields (after the command name).
 */
function sumOverTree(pid, figure) {
  const stats = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const fields = readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1].split(' ');
      stats.set(Number(entry), { ppid: Number(fields[1]), value: figure(fields) });
    } catch {
      // gone meanwhile
    }
  }
  let total = 0;
  const pending = [pid];
  while (pending.length) {
    const p = pending.pop();
    total += stats.get(p)?.value ?? 0;
    for (const [child, s] of stats) if (s.ppid === p) pending.push(child);
  }
  return total;
}

/**
 * CPU µs used so far by a process and every process below it. Children that have exited and been
 * waited for are in the parent's cutime/cstime.
 */
export function treeCpuUs(pid) {
  return sumOverTree(pid, (f) => (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * TICK_US); // utime, stime, cutime, cstime
}

/** Resident memory of a process and every process below it, in bytes (pages shared between them count in each). */
export function treeRssBytes(pid) {
  return sumOverTree(pid, (f) => Number(f[21]) * PAGE_BYTES); // rss, in pages
}

/** Busy and total CPU time of the whole machine so far, in µs (/proc/stat, all cores). */
export function machineCpu() {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0].split(/\s+/).slice(1).map(Number);
  const idle = fields[3] + fields[4]; // idle, iowait
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
  return { busy: (total - idle) * TICK_US, total: total * TICK_US };
}

/**
 * Run a load generator and also say how much CPU it used (µs): it runs under a shell that, once
 * it has waited for it, reads its own cutime/cstime from /proc, so the client's share of a busy
 * machine is known. Rejects as execFile does.
 */
export async function runWithCpu(file, args, options) {
  const { stdout, stderr } = await promisify(execFile)('sh', ['-c', '"$@"; rc=$?; cat /proc/$$/stat >&2; exit $rc', 'sh', file, ...args], options);
  const lines = stderr.trim().split('\n');
  const stat = lines.pop().split(') ')[1].split(' ');
  return { stdout, stderr: lines.join('\n'), cpuUs: (Number(stat[13]) + Number(stat[14])) * TICK_US }; // cutime, cstime
}
