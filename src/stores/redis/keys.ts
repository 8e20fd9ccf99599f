/** Where a record lives: its Redis key, that key's Cluster slot, and a SCAN over every record key. */
import { hash } from 'node:crypto';
import { StoreUnavailableError } from '../../core/errors.js';
import type { RecordRef } from '../../core/store.js';
import type { StoreClient } from './client.js';
import { jsonString } from './json-text.js';
import { messageOf, text } from './reply.js';

/**
 * The Redis key of a record. The pair is hashed: braces in a scope or key cannot break the
 * `{…}` hash tag, and JSON of the pair is injective, so two pairs never share a key. The tag
 * keeps any future companion key of a record on the record's Cluster slot.
 */
export function redisRecordKey(prefix: string, ref: RecordRef): string {
  return `${prefix}:{${hash('sha256', `[${jsonString(ref.scope)},${jsonString(ref.key)}]`, 'hex')}}`;
}

/** The Cluster slot of `key`, as Redis computes it: CRC16 (XMODEM) of its hash tag (or the whole key), mod 16384. */
export function keySlot(key: string): number {
  const open = key.indexOf('{');
  const close = open === -1 ? -1 : key.indexOf('}', open + 1);
  const hashed = close > open + 1 ? key.slice(open + 1, close) : key;
  let crc = 0;
  for (const byte of Buffer.from(hashed, 'utf8')) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

/** How many keys one SCAN asks each node for. */
const SCAN_COUNT = 500;

/**
 * The keys matching `pattern`, one SCAN page at a time, on every master of a Cluster (on the one
 * server otherwise): never KEYS, so Redis is not blocked for the pass. A key may be gone by the
 * time its page is read. A SCAN that fails throws `StoreUnavailableError` naming `pass`.
 */
export async function* scanKeys(client: StoreClient, pattern: string, pass: string): AsyncGenerator<string[]> {
  let nodes;
  try {
    nodes = await client.masters();
  } catch (error) {
    throw new StoreUnavailableError(`redis store: ${pass} failed: ${messageOf(error)}`, { cause: error });
  }
  for (const node of nodes) {
    let cursor = '0';
    do {
      let reply: unknown;
      try {
        reply = await node.send('scan', [cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT]);
      } catch (error) {
        throw new StoreUnavailableError(`redis store: ${pass} failed: ${messageOf(error)}`, { cause: error });
      }
      const [next, keys] = Array.isArray(reply) ? reply : [];
      cursor = text(next) ?? '0';
      yield Array.isArray(keys) ? keys.map((k) => text(k) ?? '') : [];
    } while (cursor !== '0');
  }
}
