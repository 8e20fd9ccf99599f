// Event sources that are not HTTP (SQS, SNS, S3, EventBridge, Kinesis, DynamoDB streams): each
// record through `idempotent(fn)` under the key its source gives it, and a batch's failures as
// Lambda's partial batch response.
import { createHash } from 'node:crypto';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotentOptions } from '../patterns/idempotent.js';
import { idempotent } from '../patterns/idempotent.js';
import type { LambdaContext } from './events.js';
import { InvocationLeases } from './leases.js';

/** The longest key the engine takes (key.ts); an S3 key over it is hashed. */
const MAX_KEY = 255;

type Loose = Record<string, unknown> | undefined;

/**
 * The idempotency key each event source gives a record or event, the same on every redelivery:
 * - SQS: `messageId` (a FIFO queue's redeliveries too; a producer that sends the same payload
 *   twice makes two messages: dedupe it by `attributes.MessageDeduplicationId` with a key function);
 * - SNS: `Sns.MessageId`;
 * - EventBridge: the event's `id`;
 * - S3: the bucket, the object key and `s3.object.sequencer` (the sequencer orders the events of
 *   one object key only), hashed when longer than 255 characters;
 * - Kinesis and DynamoDB streams: `eventID` (shard and sequence number).
 * Throws `InvalidOptionError` for a shape it does not know: give your own key function then.
 */
export function eventKey(record: object): string {
  const r = record as Record<string, unknown>;
  const source = r.eventSource ?? r.EventSource;
  if (source === 'aws:sqs' && typeof r.messageId === 'string') return r.messageId;
  if (source === 'aws:sns' && typeof (r.Sns as Loose)?.MessageId === 'string') return `sns:${(r.Sns as Record<string, string>).MessageId}`;
  if (source === 'aws:s3') {
    const s3 = r.s3 as Loose;
    const bucket = (s3?.bucket as Loose)?.name;
    const object = s3?.object as Loose;
    if (typeof bucket === 'string' && typeof object?.key === 'string' && typeof object.sequencer === 'string') {
      const key = `s3:${bucket}/${object.key}@${object.sequencer}`;
      // Object keys are URL-encoded in the event, so printable ASCII; only their length may not fit.
      return key.length <= MAX_KEY ? key : `s3:${createHash('sha256').update(`${bucket}/${object.key}`).digest('hex')}@${object.sequencer}`;
    }
  }
  if ((source === 'aws:kinesis' || source === 'aws:dynamodb') && typeof r.eventID === 'string') return `${source.slice(4)}:${r.eventID}`;
  if (typeof r['detail-type'] === 'string' && typeof r.id === 'string') return `eventbridge:${r.id}`;
  throw new InvalidOptionError('key', 'eventKey(record): not an SQS, SNS, S3, Kinesis or DynamoDB stream record, nor an EventBridge event; give a key function');
}

/** What stays the same across redeliveries of a record, fingerprinted with its key (not the receipt handle or receive count). */
function stablePart(record: object): unknown {
  const r = record as Record<string, unknown>;
  if (r.eventSource === 'aws:sqs') return r.body;
  if (r.EventSource === 'aws:sns') return (r.Sns as Loose)?.Message;
  if (r.eventSource === 'aws:s3') return (r.s3 as Loose)?.object;
  if (r.eventSource === 'aws:kinesis') return (r.kinesis as Loose)?.data;
  if (r.eventSource === 'aws:dynamodb') return (r.dynamodb as Loose)?.Keys;
  return null;
}

/** The identifier Lambda's partial batch response names a failed record by, or undefined where the source has none. */
function itemIdentifier(record: object): string | undefined {
  const r = record as Record<string, unknown>;
  if (r.eventSource === 'aws:sqs' && typeof r.messageId === 'string') return r.messageId;
  if (r.eventSource === 'aws:kinesis') return (r.kinesis as Loose)?.sequenceNumber as string | undefined;
  if (r.eventSource === 'aws:dynamodb') return (r.dynamodb as Loose)?.SequenceNumber as string | undefined;
  return undefined;
}

/** The options of `idempotentRecords`: `idempotent`'s, with the key (`eventKey` by default) and the lease margin. */
export type RecordsOptions<R extends object> = Omit<IdempotentOptions<[R, LambdaContext | undefined]>, 'key' | 'scope' | 'fingerprint'> & {
  /** @default eventKey */
  readonly key?: (record: R) => string;
  readonly scope?: string | ((record: R) => string);
  /** @default the SQS body, SNS message, S3 object, Kinesis data or DynamoDB keys */
  readonly fingerprint?: (record: R) => unknown;
  /** As on `withIdempotency`: how long a lease may outlive the invocation. @default 1000 */
  readonly leaseMarginMs?: number;
};

/** Lambda's partial batch response (`ReportBatchItemFailures` on the event source mapping). */
interface BatchResponse {
  batchItemFailures: Array<{ itemIdentifier: string }>;
}

/**
 * A handler for a batch of records (`event.Records`) that runs `fn` once per record, each under
 * `idempotent(fn)` with the record's key: a record done before is replayed, not run again. A
 * record whose `fn` throws is named in `batchItemFailures` (SQS, Kinesis, DynamoDB streams) and
 * redelivered alone; the others are not run again, even when the whole batch comes back. On a
 * FIFO queue the records after a failure are reported too, unrun, to keep their order. Sources
 * without partial batch responses (S3, SNS) get the first error thrown once every record was
 * tried, so Lambda retries the event and its done records replay.
 */
export function idempotentRecords<R extends object>(
  fn: (record: R, context: LambdaContext | undefined) => unknown,
  options: RecordsOptions<R>,
): (event: { readonly Records: readonly R[] }, context?: LambdaContext) => Promise<BatchResponse> {
  const { key, scope, fingerprint, leaseMarginMs, ...shared } = options;
  const leases = new InvocationLeases(leaseMarginMs, 'idempotentRecords()');
  const keyOf = key ?? eventKey;
  const fingerprintOf = fingerprint ?? stablePart;
  const once = idempotent(
    fn,
    Object.assign({}, shared, {
      name: options.name ?? fn.name,
      store: leases.wrap(options.store),
      key: (record: R) => keyOf(record),
      fingerprint: (record: R) => fingerprintOf(record),
      scope: typeof scope === 'function' ? (record: R) => scope(record) : scope,
    }),
  );
  return async function recordsHandler(event, context) {
    const batchItemFailures: Array<{ itemIdentifier: string }> = [];
    let thrown: { error: unknown } | undefined;
    for (const record of event.Records) {
      const id = itemIdentifier(record);
      const fifo = String((record as Record<string, unknown>).eventSourceARN ?? '').endsWith('.fifo');
      if (fifo && batchItemFailures.length > 0 && id !== undefined) {
        batchItemFailures.push({ itemIdentifier: id });
        continue;
      }
      const { result, invocation } = leases.run(context, () => once(record, context));
      try {
        await result;
      } catch (error) {
        shared.onError?.(error);
        if (id !== undefined) batchItemFailures.push({ itemIdentifier: id });
        else thrown ??= { error };
      } finally {
        leases.end(invocation);
      }
    }
    if (thrown !== undefined) throw thrown.error;
    return { batchItemFailures };
  };
}
