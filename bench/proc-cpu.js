// CPU time of a server process, read from /proc (Linux): what a request costs the machine, which
// on a shared, noisy box compares better between runs than requests per second do.
import { readFileSync } from 'node:fs';

const TICK_US = 1e6 / 100; // /proc reports CPU in clock ticks of 10 ms (USER_HZ = 100 on Linux)

/** CPU µs used so far by a process and by its main thread (the thread whose id is the pid). */
export function cpuUs(pid) {
  const ticks = (file) => {
    const fields = readFileSync(file, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US; // utime, stime
  };
  return { process: ticks(`/proc/${pid}/stat`), main: ticks(`/proc/${pid}/task/${pid}/stat`) };
}
