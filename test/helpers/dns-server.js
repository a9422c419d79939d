// A DNS server on 127.0.0.1 that the test controls: A records for the names it sets (TTL 0, so
// nothing caches them), no records (NODATA) for other types of those names, NXDOMAIN for the rest.
// Enough of RFC 1035 for a resolver asking one question over UDP; `pause()` stops it answering.
import dgram from 'node:dgram';
import { once } from 'node:events';

/**
 * The reply to one query, or null for a message that is not one question.
 * @param {Buffer} query
 * @param {Map<string, string[]>} records name -> its IPv4 addresses
 */
function reply(query, records) {
  if (query.length < 12 || query.readUInt16BE(4) !== 1) return null;
  let at = 12;
  const labels = [];
  while (at < query.length && query[at] !== 0) {
    labels.push(query.subarray(at + 1, at + 1 + query[at]).toString('ascii'));
    at += 1 + query[at];
  }
  at += 1;
  if (at + 4 > query.length) return null;
  const type = query.readUInt16BE(at);
  const question = query.subarray(12, at + 4);
  const addresses = records.get(labels.join('.').toLowerCase());
  /** @type {string[]} */
  const answers = addresses && type === 1 ? addresses : [];
  const header = Buffer.alloc(12);
  header.writeUInt16BE(query.readUInt16BE(0), 0); // the query's id
  header.writeUInt16BE(0x8580 | (addresses ? 0 : 3), 2); // a response, authoritative, recursion; NXDOMAIN when unknown
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(answers.length, 6);
  const rrs = answers.map((a) => {
    const rr = Buffer.alloc(16);
    rr.writeUInt16BE(0xc00c, 0); // the name: a pointer to the question's
    rr.writeUInt16BE(1, 2); // A
    rr.writeUInt16BE(1, 4); // IN
    rr.writeUInt32BE(0, 6); // TTL 0
    rr.writeUInt16BE(4, 10);
    a.split('.').forEach((octet, i) => { rr[12 + i] = Number(octet); });
    return rr;
  });
  return Buffer.concat([header, question, ...rrs]);
}

export async function startDnsServer() {
  /** @type {Map<string, string[]>} */
  const records = new Map();
  let answering = true;
  const socket = dgram.createSocket('udp4');
  socket.on('message', (msg, from) => {
    const answer = answering ? reply(msg, records) : null;
    if (answer) socket.send(answer, from.port, from.address);
  });
  socket.bind(0, '127.0.0.1');
  await once(socket, 'listening');
  return {
    /** host:port, for a resolver setting. */
    address: `127.0.0.1:${socket.address().port}`,
    /** @param {string} name @param {string[]} addresses IPv4 addresses; [] answers the name with no record */
    set: (name, addresses) => { records.set(name.toLowerCase(), addresses); },
    pause: () => { answering = false; },
    resume: () => { answering = true; },
    close: () => new Promise((resolve) => socket.close(() => resolve(undefined))),
  };
}
