/** Where a record lives: its Redis key, and that key's Cluster slot. */
import { hash } from 'node:crypto';
import type { RecordRef } from '../../core/store.js';

/**
 * The Redis key of a record. The pair is hashed: braces in a scope or key cannot break the
 * `{…}` hash tag, and JSON of the pair is injective, so two pairs never share a key. The tag
 * keeps any future companion key of a record on the record's Cluster slot.
 */
export function redisRecordKey(prefix: string, ref: RecordRef): string {
  return `${prefix}:{${hash('sha256', JSON.stringify([ref.scope, ref.key]), 'hex')}}`;
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
