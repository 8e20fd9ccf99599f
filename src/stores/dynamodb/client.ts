/**
 * How the store talks to DynamoDB: through the application's own `DynamoDBClient` (its region,
 * credentials, retries and HTTP agent), with command objects of `@aws-sdk/client-dynamodb`, an
 * optional peer dependency that only this subpath loads. A v3 command is not a plain object: the
 * client calls its `resolveMiddleware`, which adds the operation's serializer and endpoint rules
 * from the SDK's generated schema, so building one without the SDK would mean copying SDK internals.
 */
import {
  CreateTableCommand,
  DeleteItemCommand,
  DescribeTableCommand,
  DescribeTimeToLiveCommand,
  GetItemCommand,
  PutItemCommand,
  ScanCommand,
  UpdateItemCommand,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import { StoreSchemaMissingError, StoreUnavailableError } from '../../core/errors.js';
import type { Item } from './item.js';

/**
 * The part of a `DynamoDBClient` (`@aws-sdk/client-dynamodb` v3) the store uses: `send`. Typed
 * structurally, so the application's client fits whatever SDK minor version it was built with.
 */
export interface DynamoDBClientLike {
  send(command: never, options?: never): Promise<unknown>;
}

export const MIGRATE_FIX = 'await store.migrate() (or `idemkit migrate --store dynamodb: --table TABLE`)';

const COMMANDS = {
  PutItem: PutItemCommand,
  GetItem: GetItemCommand,
  UpdateItem: UpdateItemCommand,
  DeleteItem: DeleteItemCommand,
  Scan: ScanCommand,
  CreateTable: CreateTableCommand,
  DescribeTable: DescribeTableCommand,
  UpdateTimeToLive: UpdateTimeToLiveCommand,
  DescribeTimeToLive: DescribeTimeToLiveCommand,
} as const;

export type Operation = keyof typeof COMMANDS;

/** What DynamoDB answered an operation: the fields the store reads. */
export interface Output {
  readonly Item?: Item;
  readonly Attributes?: Item;
  readonly Items?: Item[];
  readonly LastEvaluatedKey?: Item;
  readonly Table?: {
    readonly TableStatus?: string;
    readonly KeySchema?: ReadonlyArray<{ readonly AttributeName?: string; readonly KeyType?: string }>;
    readonly AttributeDefinitions?: ReadonlyArray<{ readonly AttributeName?: string; readonly AttributeType?: string }>;
    readonly TableSizeBytes?: number;
  };
  readonly TableDescription?: { readonly TableStatus?: string };
  readonly TimeToLiveDescription?: { readonly TimeToLiveStatus?: string; readonly AttributeName?: string };
}

/** A failed condition: the item as it was, when the service returned it (`ReturnValuesOnConditionCheckFailure`). */
export class ConditionFailed extends Error {
  constructor(readonly item: Item | undefined) {
    super('the conditional request failed');
  }
}

const errorName = (error: unknown): string => String((error as { name?: unknown } | null)?.name ?? '');
const messageOf = (error: unknown): string => String((error as { message?: unknown } | null)?.message ?? error);

export interface Sender {
  /** Sends one operation; a failed condition is `ConditionFailed`, a missing table `StoreSchemaMissingError`, anything else `StoreUnavailableError`. */
  (operation: Operation, input: Record<string, unknown>): Promise<Output>;
}

export function sender(client: DynamoDBClientLike, table: string): Sender {
  const send = client.send.bind(client) as unknown as (command: object) => Promise<Output>;
  return async (operation, input) => {
    try {
      const Command = COMMANDS[operation] as unknown as new (input: Record<string, unknown>) => object;
      return await send(new Command(input));
    } catch (error) {
      throw translate(error, operation, table);
    }
  };
}

export function translate(error: unknown, operation: string, table: string): Error {
  const name = errorName(error);
  if (name === 'ConditionalCheckFailedException') return new ConditionFailed((error as { Item?: Item }).Item);
  if (name === 'ResourceNotFoundException') return new StoreSchemaMissingError('dynamodb', [`table ${table}`], MIGRATE_FIX, { cause: error });
  return new StoreUnavailableError(`dynamodb store: ${operation} failed: ${name ? `${name}: ` : ''}${messageOf(error)}`, { cause: error });
}

/** An item over DynamoDB's 400 KB limit: the service refuses the write with this ValidationException. */
export function isItemTooLarge(error: unknown): boolean {
  const cause = (error as { cause?: unknown } | null)?.cause;
  return errorName(cause) === 'ValidationException' && /item size/i.test(messageOf(cause));
}
