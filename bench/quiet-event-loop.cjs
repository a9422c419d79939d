// Preloaded (`node --require`) into every server bench/instructions.js counts, this build's and the
// baseline's alike: prom-client's event-loop delay monitor (collectDefaultMetrics) samples every
// 10 ms, and under valgrind those wake-ups are ~0.5-1 M instructions a second of the server's idle,
// which fires at a rate that depends on how busy the machine is and so cannot be taken out of a
// window exactly. Here it samples once a minute: the metric stays, the wake-ups go.
const perfHooks = require('node:perf_hooks');

const monitor = perfHooks.monitorEventLoopDelay;
perfHooks.monitorEventLoopDelay = (options = {}) => monitor({ ...options, resolution: 60_000 });
