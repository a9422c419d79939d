/**
 * A node's RepositoryIndex answer read straight from its bytes into the names of its READY models,
 * in the node's order: all a gateway keeps of it. protobufjs made an object and four strings of
 * every entry, where this makes a name per entry and compares the state's bytes: at 10,000 models
 * 2 ms warm against 5 (cold, the first read in a process, 15-20 ms either way: V8 compiling it).
 * Field numbers are proto/grpc_service.proto's (RepositoryIndexResponse); test/unit/remote/index-report.test.js
 * holds the two together.
 */
import { WIRE_LEN } from '../shared/protobuf-wire.js';
import { WireReader } from './wire-reader.js';

// RepositoryIndexResponse's field, and its ModelIndex's.
const RESPONSE_MODELS = 1;
const MODEL_NAME = 1;
const MODEL_STATE = 3;

/** The READY models a RepositoryIndex answer names (an entry in another state is left out). */
export function readReadyModels(bytes: Buffer): string[] {
  const ready: string[] = [];
  new WireReader('RepositoryIndex answer', bytes, 0, bytes.length).forEachMessage(RESPONSE_MODELS, (m) => {
    let name = '';
    let isReady = false;
    while (m.at < m.end) {
      const t = m.varint();
      const field = Math.floor(t / 8);
      const wireType = t & 7;
      if (field === MODEL_NAME && wireType === WIRE_LEN) name = m.string();
      else if (field === MODEL_STATE && wireType === WIRE_LEN) isReady = m.equalsAscii('READY');
      else m.skip(wireType);
    }
    if (isReady) ready.push(name);
  });
  return ready;
}
