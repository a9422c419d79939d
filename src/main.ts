/**
 * The command line: `node main.js node.yaml` serves; `--check-config FILE`
 * validates and prints the effective configuration; `bundle create|check`
 * makes and checks bundles (cli/bundle.ts); `--help` explains.
 */
import { BUNDLE_USAGE, bundleCommand } from './cli/bundle.js';
import { environmentOverrides, isGatewayOnly, loadNodeConfig } from './config/load.js';
import { StowageError } from './shared/errors.js';
import { createLogger } from './shared/log.js';
import { StowageGateway } from './remote/gateway-server.js';
import { StowageServer } from './node/server.js';

const USAGE = `Stowage: a KServe V2 / Triton-compatible inference server for ONNX models.

usage:
  node main.js NODE_FILE                 serve the model repository NODE_FILE names
  node main.js --check-config NODE_FILE  validate NODE_FILE (with environment overrides)
                                         and print the effective configuration
  node main.js bundle create MODEL.onnx --out DIR [options]
                                         make a bundle of an ONNX file and load it as the server would
  node main.js bundle check DIR          run the server's checks on a bundle
  node main.js --help                    this text

${BUNDLE_USAGE.replace(/^usage:\n/, 'bundle commands:\n')}

The node file is YAML (see node.yaml and docs/configuration.md). Environment overrides:
${environmentOverrides().map((o) => `  ${o.env.padEnd(44)} ${o.keyPath.join('.')}`).join('\n')}
`;

/** What requests in flight get to finish when the process must end (no device left in service). */
const FATAL_GRACE_MS = 2000;

function fail(err: unknown): never {
  const message = err instanceof StowageError ? err.message : (err as Error)?.stack ?? String(err);
  process.stderr.write(`stowage: ${message}\n`);
  process.exit(2);
}

async function main(argv: string[]): Promise<void> {
  if (argv[0] === 'bundle') {
    process.exitCode = await bundleCommand(argv.slice(1));
    return;
  }
  if (argv.length === 0 || argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(USAGE);
    if (argv.length === 0) process.exitCode = 2;
    return;
  }
  if (argv[0] === '--check-config') {
    if (!argv[1]) fail(new Error('--check-config needs a node file'));
    const { config, overrides } = loadNodeConfig(argv[1]);
    process.stdout.write(`${JSON.stringify({ config, overrides }, null, 2)}\n`);
    return;
  }
  if (argv.length > 1) fail(new Error(`unexpected arguments ${argv.slice(1).join(' ')}; usage: node main.js NODE_FILE`));
  const { config, overrides } = loadNodeConfig(argv[0]);
  const logger = createLogger(config.global.logging.level);
  logger.info({ config, overrides }, 'effective configuration');
  // gateway.endpoints or gateway.discovery makes this process a gateway in front of remote nodes, with no devices of
  // its own.
  const server = isGatewayOnly(config) ? await StowageGateway.start(config, logger) : await StowageServer.start(config, logger);

  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal, inflight: server.admission.inflight, grace_seconds: config.global.endpoints.shutdown_grace_seconds },
      'stopping: finishing in-flight requests');
    server.stop().then(() => {
      logger.info('stopped');
      process.exit(0);
    }, (err: Error) => {
      logger.error({ err }, 'error while stopping');
      process.exit(1);
    });
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // No device left in service (each GPU's context poisoned): this process can serve nothing more.
  // It exits non-zero for its supervisor (Kubernetes, systemd) to start a new one.
  if (server instanceof StowageServer) {
    void server.fatal.then((why) => {
      if (stopping) return;
      stopping = true;
      logger.fatal({ why }, 'no device is in service: exiting for the supervisor to start a new process');
      server.stop(FATAL_GRACE_MS).finally(() => process.exit(70));
    });
  }
}

main(process.argv.slice(2)).catch(fail);
