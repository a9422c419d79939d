/**
 * The repository scanner: each immediate subdirectory of the model repository
 * that holds a manifest.yaml is a bundle, and its directory name is the model
 * name. A bundle whose manifest fails to parse is reported with its error; it
 * never stops the others.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { errors, type StowageError } from '../shared/errors.js';
import { MANIFEST_FILE, readManifest } from './manifest.js';
import type { ModelSpec } from '../shared/model-spec.js';

export type ScannedBundle =
  | { name: string; dir: string; spec: ModelSpec; error?: undefined }
  | { name: string; dir: string; spec?: undefined; error: StowageError };

export function scanRepository(repo: string): ScannedBundle[] {
  if (!existsSync(repo) || !statSync(repo).isDirectory()) {
    throw errors.configInvalid(`model_repo ${repo} is not a directory`);
  }
  const out: ScannedBundle[] = [];
  for (const entry of readdirSync(repo, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    if (!entry.isDirectory() || entry.name.startsWith('.')) continue;
    const dir = path.join(repo, entry.name);
    if (!existsSync(path.join(dir, MANIFEST_FILE))) continue;
    try {
      out.push({ name: entry.name, dir, spec: readManifest(dir) });
    } catch (err) {
      out.push({ name: entry.name, dir, error: err as StowageError });
    }
  }
  return out;
}
