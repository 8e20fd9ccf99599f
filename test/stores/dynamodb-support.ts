/**
 * DynamoDB for the tests: dynalite (an in-process DynamoDB on LevelDB's in-memory backend), started
 * on a spare port by the test that needs it and closed by it, with a real `DynamoDBClient`.
 */
import { randomUUID } from 'node:crypto';
import { Agent } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DeleteItemCommand, DescribeTimeToLiveCommand, DynamoDBClient, GetItemCommand, PutItemCommand, ScanCommand, UpdateTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import dynalite from 'dynalite';
import type { DynamoDBClientLike } from '../../src/stores/dynamodb/index.js';

// The SDK warns once per process that its releases from 2027 need Node 22; the tests run Node 20 on purpose.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
// dynalite takes any credentials; the CLI's subprocesses find these the SDK's way (the environment).
process.env.AWS_ACCESS_KEY_ID ??= 'test';
process.env.AWS_SECRET_ACCESS_KEY ??= 'test';

export interface Dynalite {
  readonly endpoint: string;
  /** A client of its own (the SDK's defaults), for a store or for the test's own reads. */
  client(): DynamoDBClient;
  close(): Promise<void>;
}

/** `createTableMs`: how long a new table stays CREATING (DynamoDB takes seconds); 0 by default. */
export async function startDynalite(options: { createTableMs?: number } = {}): Promise<Dynalite> {
  const server = dynalite({ createTableMs: options.createTableMs ?? 0, deleteTableMs: 0, updateTableMs: 0 });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const clients: DynamoDBClient[] = [];
  return {
    endpoint,
    client() {
      // More sockets than the SDK's 50: the contract sends 200 claims at once.
      const requestHandler = { httpAgent: new Agent({ keepAlive: true, maxSockets: 256 }) };
      const client = new DynamoDBClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' }, requestHandler });
      clients.push(client);
      return client;
    },
    async close() {
      for (const client of clients) client.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export const uniqueTable = () => `idemkit_test_${randomUUID().slice(0, 8)}`;

/**
 * dynalite has no UpdateTimeToLive (it answers UnknownOperationException) and its
 * DescribeTimeToLive always says DISABLED: this client answers both from what it was told, and
 * sends everything else on. docs/stores/dynamodb.md lists it among dynalite's differences.
 */
export function withTtlApi(client: DynamoDBClient): DynamoDBClientLike & { ttl: Map<string, string> } {
  const ttl = new Map<string, string>();
  return {
    ttl,
    send: (async (command: { input: { TableName: string; TimeToLiveSpecification?: { AttributeName: string } } }) => {
      if (command instanceof UpdateTimeToLiveCommand) {
        ttl.set(command.input.TableName, command.input.TimeToLiveSpecification!.AttributeName);
        return { TimeToLiveSpecification: command.input.TimeToLiveSpecification };
      }
      if (command instanceof DescribeTimeToLiveCommand) {
        const attribute = ttl.get(command.input.TableName);
        return { TimeToLiveDescription: attribute === undefined ? { TimeToLiveStatus: 'DISABLED' } : { TimeToLiveStatus: 'ENABLED', AttributeName: attribute } };
      }
      return client.send(command as never);
    }) as DynamoDBClientLike['send'],
  };
}

/**
 * A client that behaves as DynamoDB does where dynalite does not: a PutItem (or DeleteItem) whose
 * condition failed, sent with `ReturnValuesOnConditionCheckFailure: 'ALL_OLD'`, comes back with
 * the item as it was. It reads the item with a consistent GetItem of its own, which the store does
 * not see. `calls` counts what the store sent, by operation.
 */
export function returningOldItems(client: DynamoDBClientLike): DynamoDBClientLike & { calls: string[] } {
  const calls: string[] = [];
  const send = client.send.bind(client) as unknown as (command: object) => Promise<unknown>;
  return {
    calls,
    send: (async (command: { constructor: { name: string }; input: { TableName: string; Key?: unknown; Item?: Record<string, unknown>; ReturnValuesOnConditionCheckFailure?: string } }) => {
      calls.push(command.constructor.name.replace(/Command$/, ''));
      try {
        return await send(command);
      } catch (error) {
        if ((error as Error).name !== 'ConditionalCheckFailedException' || command.input.ReturnValuesOnConditionCheckFailure !== 'ALL_OLD') throw error;
        const isPut = command instanceof PutItemCommand;
        const key = isPut ? { pk: command.input.Item!.pk } : command.input.Key;
        const { Item } = (await send(new GetItemCommand({ TableName: command.input.TableName, Key: key as never, ConsistentRead: true }))) as { Item?: unknown };
        throw Object.assign(error as Error, { Item });
      }
    }) as DynamoDBClientLike['send'],
  };
}

/** A client that counts what the store sends, by operation (and keeps each input), and sends it on. */
export function counting(client: DynamoDBClientLike): DynamoDBClientLike & { calls: string[]; inputs: Array<Record<string, unknown>> } {
  const calls: string[] = [];
  const inputs: Array<Record<string, unknown>> = [];
  const send = client.send.bind(client) as unknown as (command: object) => Promise<unknown>;
  return {
    calls,
    inputs,
    send: (async (command: { constructor: { name: string }; input: Record<string, unknown> }) => {
      calls.push(command.constructor.name.replace(/Command$/, ''));
      inputs.push(command.input);
      return send(command);
    }) as DynamoDBClientLike['send'],
  };
}

/** Deletes every item of `table` (a model run's reset). */
export async function emptyTable(client: DynamoDBClient, table: string): Promise<void> {
  let start: Record<string, never> | undefined;
  do {
    const out = await client.send(new ScanCommand({ TableName: table, ProjectionExpression: 'pk', ExclusiveStartKey: start, ConsistentRead: true }));
    await Promise.all((out.Items ?? []).map((item) => client.send(new DeleteItemCommand({ TableName: table, Key: { pk: item.pk! } }))));
    start = out.LastEvaluatedKey as Record<string, never> | undefined;
  } while (start !== undefined);
}
