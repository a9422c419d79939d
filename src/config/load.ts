/**
 * Load the node file: parse the YAML, apply environment overrides, validate
 * against the schema (filling defaults), resolve paths, freeze.
 *
 * Environment overrides follow the seeds: `INFERENCE_SERVER_<SECTION>_<FIELD>`
 * sets `global.<section>.<field>` (deeper sections likewise: `INFERENCE_SERVER_RUNTIME_CUDA_TF32`
 * sets `global.runtime.cuda.tf32`), and `INFERENCE_SERVER_<KEY>` a top-level
 * key or a scalar directly under `global`, and `INFERENCE_SERVER_GATEWAY_<FIELD>`
 * (`_SCHEDULING_<FIELD>`) the gateway's, for every scalar and list the schema
 * declares (list values are colon-separated; lists of host:port, comma-separated). The table of names is derived from
 * the schema, so a new key gets its override for free; an unknown `INFERENCE_SERVER_*`
 * variable stops start-up rather than being ignored.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Ajv } from 'ajv';
import YAML from 'yaml';
import { errors } from '../shared/errors.js';
import { describeSchemaErrors } from '../shared/schema-errors.js';
import { nodeConfigSchema, type NodeConfig, type ValidatedConfig } from '../shared/config-schema.js';
import { resolveWorkers } from './workers.js';

const ENV_PREFIX = 'INFERENCE_SERVER_';

interface SchemaNode {
  type?: string;
  anyOf?: readonly SchemaNode[];
  enum?: readonly unknown[];
  properties?: Record<string, SchemaNode>;
  additionalProperties?: boolean;
  items?: SchemaNode;
  pattern?: string;
}

interface Override {
  env: string;
  /** Key path in the node file, e.g. ['global', 'endpoints', 'grpc_port']. */
  keyPath: string[];
  schema: SchemaNode;
}

/**
 * Scalars and lists of scalars (colon-separated) can come from the environment; mappings and lists of mappings cannot.
 */
function isScalar(node: SchemaNode): boolean {
  return node.type !== 'object' && !(node.type === 'array' && node.items?.type === 'object');
}

/** Every environment override the schema allows, derived from the schema itself. */
export function environmentOverrides(): Override[] {
  const out: Override[] = [];
  const root = nodeConfigSchema as unknown as SchemaNode;
  for (const [key, node] of Object.entries(root.properties ?? {})) {
    if (isScalar(node)) out.push({ env: ENV_PREFIX + key.toUpperCase(), keyPath: [key], schema: node });
  }
  // gateway.*, nested sections included: INFERENCE_SERVER_GATEWAY_<FIELD>, INFERENCE_SERVER_GATEWAY_SCHEDULING_<FIELD>.
  const nested = (prefix: string, keyPath: string[], node: SchemaNode): void => {
    for (const [field, child] of Object.entries(node.properties ?? {})) {
      const env = `${prefix}_${field.toUpperCase()}`;
      if (isScalar(child)) out.push({ env, keyPath: [...keyPath, field], schema: child });
      else if (child.properties) nested(env, [...keyPath, field], child);
    }
  };
  if (root.properties?.gateway) nested(`${ENV_PREFIX}GATEWAY`, ['gateway'], root.properties.gateway);
  const global = root.properties?.global?.properties ?? {};
  for (const [section, sectionNode] of Object.entries(global)) {
    if (isScalar(sectionNode)) {
      // A scalar directly under global (model_control_mode): INFERENCE_SERVER_<FIELD>.
      out.push({ env: ENV_PREFIX + section.toUpperCase(), keyPath: ['global', section], schema: sectionNode });
      continue;
    }
    // global.<section>.<field>, and deeper sections the same way (runtime.cuda.graphs:
    // INFERENCE_SERVER_RUNTIME_CUDA_GRAPHS).
    nested(`${ENV_PREFIX}${section.toUpperCase()}`, ['global', section], sectionNode);
  }
  const names = new Set<string>();
  for (const o of out) {
    if (names.has(o.env)) throw errors.internal(`two config keys share the override ${o.env}`);
    names.add(o.env);
  }
  return out;
}

/** Turn an environment string into the type the schema expects; validation reports a bad value. */
function coerce(raw: string, schema: SchemaNode): unknown {
  if (schema.anyOf) {
    // gpus: auto, a count, or a colon-separated list of ids; upload_beside_execution and
    // session_per_batch_size: auto or a boolean.
    if (raw === 'true' || raw === 'false') return raw === 'true';
    if (/^\d+$/.test(raw)) return Number(raw);
    if (raw.includes(':')) return raw.split(':').map((p) => (/^\d+$/.test(p) ? Number(p) : p));
    return raw;
  }
  const type = schema.type;
  if (type === 'integer' || type === 'number') {
    const n = Number(raw);
    return raw.trim() !== '' && Number.isFinite(n) ? n : raw;
  }
  if (type === 'boolean') return raw === 'true' ? true : raw === 'false' ? false : raw;
  // Lists are colon-separated, except lists of host:port addresses, which are comma-separated.
  if (type === 'array') return raw === '' ? [] : raw.split(schema.items?.pattern?.includes(':') ? ',' : ':').map((v) => v.trim());
  return raw;
}

/** Keys holding paths: relative to the node file's directory (or, from the environment, to the working directory). */
const PATH_KEYS = ['model_repo', 'cache_dir'];

/** Where compiled models go when the node file does not say: the user's cache directory (XDG). */
function defaultCacheDir(env: NodeJS.ProcessEnv): string {
  return path.join(env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'stowage');
}

function applyOverrides(doc: Record<string, unknown>, env: NodeJS.ProcessEnv, cwd: string): string[] {
  const table = environmentOverrides();
  const known = new Map(table.map((o) => [o.env, o]));
  const applied: string[] = [];
  for (const [name, raw] of Object.entries(env)) {
    if (!name.startsWith(ENV_PREFIX) || raw === undefined) continue;
    const o = known.get(name);
    if (!o) {
      throw errors.configInvalid(
        `unknown environment override ${name}; known overrides: ${table.map((t) => t.env).join(', ')}`);
    }
    let value = coerce(raw, o.schema);
    // A path given in the environment is relative to where the server starts, not to the file.
    if (PATH_KEYS.includes(o.keyPath.join('.')) && typeof value === 'string' && value !== '') value = path.resolve(cwd, value);
    let node = doc;
    for (const key of o.keyPath.slice(0, -1)) {
      const next = node[key];
      if (next === undefined || next === null) node[key] = {};
      else if (typeof next !== 'object' || Array.isArray(next)) {
        throw errors.configInvalid(`${name} overrides ${o.keyPath.join('.')}, but ${key} in the file is not a mapping`);
      }
      node = node[key] as Record<string, unknown>;
    }
    node[o.keyPath[o.keyPath.length - 1]] = value;
    applied.push(name);
  }
  return applied;
}

const ajv = new Ajv({ allErrors: true, useDefaults: true, strict: true, verbose: true });
const validate = ajv.compile<ValidatedConfig>(nodeConfigSchema);

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

export interface LoadedConfig {
  config: NodeConfig;
  /** Environment variables that overrode the file. */
  overrides: string[];
  file: string;
}

/** Parse and validate a node file's text; `file` names it in errors and anchors relative paths. */
export function parseNodeConfig(text: string, file: string, env: NodeJS.ProcessEnv = process.env,
  cwd: string = process.cwd()): LoadedConfig {
  let doc: unknown;
  try {
    doc = YAML.parse(text) ?? {};
  } catch (err) {
    throw errors.configInvalid(`${file}: not valid YAML: ${(err as Error).message}`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw errors.configInvalid(`${file}: the node file must be a YAML mapping of keys (model_repo, global, ...)`);
  }
  const overrides = applyOverrides(doc as Record<string, unknown>, env, cwd);
  // model_repo is required unless gateway.endpoints or gateway.discovery makes this a gateway-only
  // process (read here from the raw document: the schema has not filled its defaults yet).
  const raw = doc as { model_repo?: unknown; gateway?: unknown };
  const rawGateway = raw.gateway as { endpoints?: unknown; discovery?: { dns_name?: unknown } } | undefined;
  const needsRepo = raw.model_repo === undefined
    && !(Array.isArray(rawGateway?.endpoints) && rawGateway.endpoints.length > 0) && !rawGateway?.discovery?.dns_name;
  const missingRepo = 'missing required key model_repo (the directory of bundles; a gateway-only process lists gateway.endpoints or gateway.discovery.dns_name instead)';
  if (!validate(doc)) {
    const problems = describeSchemaErrors(validate.errors ?? [], doc);
    throw errors.configInvalid(`${file}: invalid configuration:\n${needsRepo ? `  ${missingRepo}\n` : ''}${problems}`);
  }
  if (needsRepo) throw errors.configInvalid(`${file}: invalid configuration:\n  ${missingRepo}`);
  const gatewayOnly = isGatewayOnly(doc);
  if (gatewayOnly && doc.gateway.scheduling.mode === 'lpt_packing') {
    throw errors.configInvalid(`${file}: gateway.scheduling.mode "lpt_packing" places models on this process's own devices; a gateway-only process (gateway.endpoints or gateway.discovery) routes with round_robin, least_outstanding or pooled`);
  }
  if (!gatewayOnly && doc.gateway.scheduling.mode === 'pooled') {
    throw errors.configInvalid(`${file}: gateway.scheduling.mode "pooled" places models across the nodes of a fleet, in a gateway-only process (gateway.endpoints or gateway.discovery); a node places models on its own devices with lpt_packing`);
  }
  const fileDir = path.dirname(path.resolve(cwd, file));
  const config: NodeConfig = Object.assign(doc, {
    model_repo: doc.model_repo === undefined ? '' : path.resolve(fileDir, doc.model_repo),
    cache_dir: doc.cache_dir === '' ? defaultCacheDir(env) : path.resolve(fileDir, doc.cache_dir),
  });
  const workers = resolveWorkers(config, file); // workers and the models: map must agree
  if (config.gateway.scheduling.mode === 'lpt_packing' && !gatewayOnly) {
    // The gateway places models and so decides fairness; a fair device scheduler would fight it.
    const fair = workers.filter((w) => w.scheduler.discipline === 'fair').map((w) => w.name);
    if (fair.length) {
      throw errors.configInvalid(`${file}: gateway.scheduling.mode "lpt_packing" needs every device to run scheduler.discipline fifo or edf, but ${fair.join(', ')} run${fair.length === 1 ? 's' : ''} "fair" (the default); set global.scheduler.discipline: fifo`);
    }
  }
  for (const w of workers) {
    const { priority_levels: levels, default_priority: fallback, models } = w.scheduler;
    const above = [[`scheduler.default_priority`, fallback], ...Object.entries(models).map(([m, p]) => [`scheduler.models.${m}.priority`, p.priority])]
      .filter(([, level]) => level !== undefined && Number(level) > levels);
    if (above.length) {
      throw errors.configInvalid(`${file}: ${above.map(([key, level]) => `${key} ${level}`).join(', ')} above scheduler.priority_levels ${levels} (worker ${w.name}): levels run from 1 (the highest) to ${levels}`);
    }
  }
  return { config: deepFreeze(config), overrides, file };
}

/** A gateway in front of remote nodes (static endpoints or discovered by DNS), with no devices of its own. */
export function isGatewayOnly(config: { readonly gateway: { readonly endpoints: readonly string[]; readonly discovery: { readonly dns_name: string } } }): boolean {
  return config.gateway.endpoints.length > 0 || config.gateway.discovery.dns_name !== '';
}

export function loadNodeConfig(file: string, env: NodeJS.ProcessEnv = process.env): LoadedConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw errors.configInvalid(`cannot read node file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseNodeConfig(text, file, env);
}
