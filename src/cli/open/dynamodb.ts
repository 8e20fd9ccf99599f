// Opens a DynamoDB store for the store commands: a client of the SDK (its region and credentials
// resolved the SDK's way: environment, profile, role), with one attempt per call, proved to answer
// before use by a look at the table.
import type { StoreNames, StoreUrl } from '../store-url.js';
import { scrub } from '../store-url.js';
import type { OpenedStore } from './driver.js';
import { CONNECT_TIMEOUT_MS, missingParts, Unreachable, flagError, importDriver, refuseNames, storeLogger } from './driver.js';

// What the CLI uses of the SDK, declared here so that nothing imports its types.
interface DynamoClient {
  send(command: never): Promise<unknown>;
  destroy(): void;
}
interface SdkModule {
  DynamoDBClient: new (config: object) => DynamoClient;
}

export async function openDynamodb(url: StoreUrl, names: StoreNames): Promise<OpenedStore> {
  refuseNames(url, names, ['table']);
  const sdk = await importDriver<SdkModule>('dynamodb');
  const { dynamodbStore } = await import('../../stores/dynamodb/index.js');
  const client = new sdk.DynamoDBClient({
    maxAttempts: 1,
    requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, requestTimeout: CONNECT_TIMEOUT_MS },
    ...(url.region === undefined ? {} : { region: url.region }),
    // A local endpoint (DynamoDB Local, dynalite) takes any region: the SDK still needs one.
    ...(url.endpoint === undefined ? {} : { endpoint: url.endpoint, region: url.region ?? process.env.AWS_REGION ?? 'us-east-1' }),
  });
  const { logger, quietly } = storeLogger();
  let store;
  try {
    store = dynamodbStore({ client, table: names.table, logger });
  } catch (error) {
    client.destroy();
    throw flagError(error);
  }
  const table = names.table ?? 'idempotency_records';
  const missing = () => missingParts(store, () => [`table ${table}`]);
  // A missing table answers; an unreachable endpoint or refused credentials do not.
  try {
    await quietly(missing);
  } catch (error) {
    client.destroy();
    throw new Unreachable(`cannot reach the store at ${url.shown}: ${scrub(reason(error, url), url)}`);
  }
  return {
    url,
    store,
    where: `DynamoDB table ${table}`,
    async migrate() {
      const created = await store.migrate();
      // TTL is named only when this run turned it on: an emulator may have no TTL to be present.
      return { created, present: created.includes(`table ${table}`) ? [] : [`table ${table}`], added: [] };
    },
    verify: () => store.verify(),
    async close() {
      client.destroy();
    },
  };
}

/**
 * Why the first call failed, with the fix for the two causes the SDK names least helpfully: no
 * region, no credentials. Neither names a credential value.
 */
function reason(error: unknown, url: StoreUrl): string {
  const cause = (error as { cause?: unknown } | null)?.cause ?? error;
  const name = String((cause as { name?: unknown } | null)?.name ?? '');
  const message = String((cause as { message?: unknown } | null)?.message ?? '');
  if (/region is missing/i.test(message)) return 'no AWS region: name it in the URL (dynamodb:eu-west-1) or set AWS_REGION';
  if (name === 'CredentialsProviderError') {
    const local = url.endpoint === undefined ? '' : ' (DynamoDB Local and dynalite take any: AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local)';
    return `no AWS credentials: the SDK found none in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE (~/.aws), or the instance or container role${local}`;
  }
  return (error as Error | null)?.message || String(error);
}
