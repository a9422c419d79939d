// node.yaml at the root claims to list every key with its default: it must say exactly what the
// schema's defaults give, key for key, so that the file a newcomer reads is the truth.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import test from 'ava';
import YAML from 'yaml';
import { parseNodeConfig } from '../../../dist/config/load.js';
import { ROOT } from '../../helpers/server.js';
import { stowageThrows } from '../../helpers/errors.js';

/**
 * Every key path of a plain object, with its value: [['global.runtime.backend', 'cpu'], ...].
 * @param {unknown} value
 * @returns {[string, unknown][]}
 */
function leaves(value, prefix = '') {
  if (value === null || typeof value !== 'object' || Array.isArray(value) || Object.keys(value).length === 0) return [[prefix, value]];
  return Object.entries(value).flatMap(([k, v]) => leaves(v, prefix ? `${prefix}.${k}` : k));
}

test('node.yaml lists every key the schema gives a default, each with that default', (t) => {
  const file = path.join(ROOT, 'node.yaml');
  const written = YAML.parse(readFileSync(file, 'utf8'));
  // The schema's defaults: the smallest valid file, filled in by the validator.
  const defaults = parseNodeConfig(`model_repo: ${written.model_repo}\n`, file, {}, ROOT).config;
  const writtenLeaves = new Map(leaves(written));
  const defaultLeaves = leaves(JSON.parse(JSON.stringify(defaults)))
    .filter(([key]) => !['model_repo', 'cache_dir'].includes(key)); // resolved paths; node.yaml writes them as given
  const missing = defaultLeaves.filter(([key]) => !writtenLeaves.has(key)).map(([key]) => key);
  t.deepEqual(missing, [], 'keys with a default that node.yaml does not list');
  const differing = defaultLeaves.filter(([key, v]) => writtenLeaves.has(key) && JSON.stringify(writtenLeaves.get(key)) !== JSON.stringify(v))
    .map(([key, v]) => `${key}: node.yaml says ${JSON.stringify(writtenLeaves.get(key))}, the default is ${JSON.stringify(v)}`);
  t.deepEqual(differing, []);
  const unknown = [...writtenLeaves.keys()].filter((key) => !defaultLeaves.some(([k]) => k === key) && !['model_repo', 'cache_dir'].includes(key));
  t.deepEqual(unknown, [], 'keys in node.yaml without a default in the schema');
  // And it is a valid node file as it stands.
  t.notThrows(() => parseNodeConfig(readFileSync(file, 'utf8'), file, {}, ROOT));
});

test('gateway keys are overridable from the environment like every other key', (t) => {
  const { config, overrides } = parseNodeConfig('model_repo: m\n', '/etc/node.yaml', {
    INFERENCE_SERVER_GATEWAY_ENDPOINTS: '10.0.0.1:8001,node-b:8001',
    INFERENCE_SERVER_GATEWAY_HEALTH_SECONDS: '5',
    INFERENCE_SERVER_GATEWAY_SCHEDULING_MODE: 'least_outstanding',
  }, '/work');
  t.deepEqual(config.gateway.endpoints, ['10.0.0.1:8001', 'node-b:8001']);
  t.is(config.gateway.health_seconds, 5);
  t.is(config.gateway.scheduling.mode, 'least_outstanding');
  t.is(overrides.length, 3);
  const bad = stowageThrows(t, () => parseNodeConfig('model_repo: m\n', '/etc/node.yaml', { INFERENCE_SERVER_GATEWAY_SCHEDULING_MODE: 'random' }, '/work'));
  t.regex(bad.message, /gateway\.scheduling\.mode/);
});
