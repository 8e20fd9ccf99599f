/**
 * One record as one DynamoDB item: its attribute names, the item a claim writes, and items read
 * back (GetItem, a failed condition's old item, Scan) as records.
 */
import { createHash } from 'node:crypto';
import { CorruptRecordError } from '../../core/errors.js';
import type { IdempotencyRecord, RecordRef, StoredResponse } from '../../core/store.js';
import { headersProblem, statusProblem } from '../shared/stored-response.js';
import { plainRecord } from '../shared/record.js';

/** An AttributeValue as the SDK sends and returns it; only the kinds the store writes. */
export interface AttributeValue {
  S?: string;
  N?: string;
  B?: Uint8Array;
  BOOL?: boolean;
  NULL?: boolean;
}
export type Item = Record<string, AttributeValue>;

/**
 * The attributes, short because every byte of a name counts against the 400 KB item limit. Every
 * expression names them through `#` placeholders, so none can collide with a reserved word.
 */
export const A = {
  /** The partition key: a hash of (scope, key), so any scope and key fit DynamoDB's 2 KB key limit. */
  pk: 'pk',
  scope: 'sc',
  key: 'k',
  fingerprint: 'fp',
  /** 'in_flight' or 'completed'. */
  state: 'st',
  token: 'tok',
  attempt: 'att',
  /** Epoch ms, by the clocks of the instances that wrote them (docs/stores/dynamodb.md). */
  leaseUntil: 'lu',
  expiresAt: 'ea',
  createdAt: 'ca',
  updatedAt: 'ua',
  recoveryPoint: 'rp',
  recoveryData: 'rd',
  status: 'sts',
  headers: 'hd',
  body: 'bd',
  bodyBytes: 'bl',
  bodyOmitted: 'bo',
  /** DynamoDB TTL: epoch seconds, after which DynamoDB may delete the item (lazily, up to days later). */
  ttl: 'ttl',
} as const;

export const IN_FLIGHT = 'in_flight';
export const COMPLETED = 'completed';

/** Every attribute as an expression placeholder (`#st`), to pass as ExpressionAttributeNames. */
export const NAMES: Record<string, string> = Object.fromEntries(Object.values(A).map((a) => [`#${a}`, a]));

/** Only the placeholders an expression uses: DynamoDB refuses unused ExpressionAttributeNames. */
export function namesIn(...expressions: string[]): Record<string, string> {
  const used: Record<string, string> = {};
  for (const e of expressions) for (const m of e.matchAll(/#(\w+)/g)) used[m[0]] = NAMES[m[0]] ?? m[1]!;
  return used;
}

export function partitionKey(ref: RecordRef): string {
  return createHash('sha256').update(JSON.stringify([ref.scope, ref.key])).digest('base64url');
}

export const keyOf = (ref: RecordRef): Item => ({ [A.pk]: { S: partitionKey(ref) } });

export const n = (value: number): AttributeValue => ({ N: String(value) });
export const s = (value: string): AttributeValue => ({ S: value });

/**
 * A record is gone for every purpose once its window has passed and no live lease holds it
 * (`:cut` is the claiming instance's clock less the margin). The same test as the SQL stores'.
 */
export const EXPIRED = `(#${A.expiresAt} <= :cut AND (#${A.state} = :completed OR #${A.leaseUntil} <= :cut))`;

export function isExpired(r: { state: string; leaseUntil: number; expiresAt: number }, cut: number): boolean {
  return r.expiresAt <= cut && (r.state === COMPLETED || r.leaseUntil <= cut);
}

/** The TTL attribute for a record that must live until `untilMs` (and the margin, and a minute more). */
export function ttlOf(untilMs: number, marginMs: number): AttributeValue {
  return n(Math.ceil((untilMs + marginMs + 60_000) / 1000));
}

export interface FreshItem {
  readonly ref: RecordRef;
  readonly fingerprint: string;
  readonly token: string;
  readonly now: number;
  readonly leaseMs: number;
  readonly windowMs: number;
  readonly marginMs: number;
}

/** The item of a new claim: in flight, first attempt, created now. */
export function freshItem(f: FreshItem): Item {
  const lease = f.now + f.leaseMs;
  const expires = f.now + f.windowMs;
  return {
    [A.pk]: s(partitionKey(f.ref)),
    [A.scope]: s(f.ref.scope),
    [A.key]: s(f.ref.key),
    [A.fingerprint]: s(f.fingerprint),
    [A.state]: s(IN_FLIGHT),
    [A.token]: s(f.token),
    [A.attempt]: n(1),
    [A.leaseUntil]: n(lease),
    [A.expiresAt]: n(expires),
    [A.createdAt]: n(f.now),
    [A.updatedAt]: n(f.now),
    [A.ttl]: ttlOf(Math.max(lease, expires), f.marginMs),
  };
}

/** A record item, read: what the store decides on and answers with. */
export interface ItemRecord extends IdempotencyRecord {
  readonly token: string;
  readonly attempt: number;
  /** The stored body's length (kept beside it, so a listing need not read bodies); null when none. */
  readonly bodyBytes: number | null;
  /** The TTL attribute, epoch seconds; undefined when absent. */
  readonly ttl: number | undefined;
}

/** Reads an item; throws `CorruptRecordError` naming the table and what is wrong. */
export function readItem(item: Item, table: string, withBody = true, ref?: RecordRef): ItemRecord {
  const scope = item[A.scope]?.S;
  const key = item[A.key]?.S;
  const where = `the record ${scope === undefined || key === undefined ? `with pk ${JSON.stringify(item[A.pk]?.S)}` : `(${JSON.stringify(scope)}, ${JSON.stringify(key)})`} in table ${table}`;
  const corrupt = (why: string) => new CorruptRecordError(`dynamodb store: ${where} cannot be read: ${why}`);
  /** An epoch-ms time or a count: a safe integer, stored as a number (N). */
  const num = (name: string, optional = false): number | undefined => {
    const value = item[name];
    if (value === undefined && optional) return undefined;
    const v = value?.N;
    if (v === undefined) throw corrupt(`attribute ${name} is missing or not a number`);
    const parsed = Number(v);
    if (!Number.isSafeInteger(parsed)) throw corrupt(`attribute ${name} is not an integer: ${JSON.stringify(v)}`);
    return parsed;
  };
  /** A text attribute (S); absent is undefined where allowed. */
  const str = (name: string, optional = false): string | undefined => {
    const value = item[name];
    if (value === undefined && optional) return undefined;
    if (typeof value?.S !== 'string') throw corrupt(`attribute ${name} is missing or not text`);
    return value.S;
  };
  if (scope === undefined || key === undefined) throw corrupt('the scope or the key is missing');
  // The item was found by the hash of `ref`: another scope or key in it is a damaged record.
  if (ref !== undefined && (scope !== ref.scope || key !== ref.key)) throw corrupt('it holds another scope or key than the one it was read for');
  const state = item[A.state]?.S;
  if (state !== IN_FLIGHT && state !== COMPLETED) throw corrupt(`unknown state ${JSON.stringify(state)}`);
  const fingerprint = str(A.fingerprint)!;
  const token = str(A.token)!;
  const recoveryPoint = str(A.recoveryPoint, true);
  let recoveryData: unknown;
  const rd = str(A.recoveryData, true);
  if (rd !== undefined) {
    try {
      recoveryData = JSON.parse(rd) as unknown;
    } catch {
      throw corrupt('the recovery data is not JSON');
    }
  }
  let response: StoredResponse | undefined;
  let bodyBytes: number | null = null;
  if (state === COMPLETED) {
    const bo = item[A.bodyOmitted];
    if (bo !== undefined && typeof bo.BOOL !== 'boolean') throw corrupt(`attribute ${A.bodyOmitted} is not a boolean`);
    const omitted = bo?.BOOL === true;
    const status = num(A.status)!;
    const badStatus = statusProblem(status);
    if (badStatus !== undefined) throw corrupt(badStatus);
    let headers: unknown;
    try {
      headers = JSON.parse(str(A.headers)!) as unknown;
    } catch {
      throw corrupt('the stored headers are not JSON');
    }
    const badHeaders = headersProblem(headers);
    if (badHeaders !== undefined) throw corrupt(badHeaders);
    const stored = item[A.body];
    if (stored !== undefined && !(stored.B instanceof Uint8Array)) throw corrupt(`attribute ${A.body} is not binary`);
    const length = num(A.bodyBytes, true);
    // Written with the body (its length when it was stored); a mismatch is a damaged record.
    if (!omitted && stored?.B !== undefined && length !== undefined && length !== stored.B.byteLength) throw corrupt(`attribute ${A.bodyBytes} is not the body's length`);
    bodyBytes = omitted ? null : (length ?? stored?.B?.byteLength ?? 0);
    // No body attribute and not omitted: an empty body. A listing reads no body (withBody false).
    const body = omitted ? null : withBody ? new Uint8Array(stored?.B ?? new Uint8Array(0)) : null;
    response = { status, headers: headers as Array<[string, string]>, body, bodyOmitted: omitted };
  }
  return {
    scope,
    key,
    state,
    fingerprint,
    token,
    attempt: num(A.attempt)!,
    leaseUntil: num(A.leaseUntil)!,
    expiresAt: num(A.expiresAt)!,
    recoveryPoint,
    recoveryData,
    response,
    createdAt: num(A.createdAt, true),
    updatedAt: num(A.updatedAt, true),
    bodyBytes,
    ttl: num(A.ttl, true),
  };
}

/** The record as `get` answers it: without what the store keeps beside it. */
export const toRecord: (r: ItemRecord) => IdempotencyRecord = plainRecord;
