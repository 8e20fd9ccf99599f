// A child process that claims keys in a shared DynamoDB table (dynalite, in the parent) when the parent says so.
import { Agent } from 'node:http';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { dynamodbStore } from '../../../src/stores/dynamodb/index.js';

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
const [endpoint, table, sharedKey, distinctKeys] = process.argv.slice(2) as [string, string, string, string];
const client = new DynamoDBClient({
  endpoint,
  region: 'us-east-1',
  credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  requestHandler: { httpAgent: new Agent({ keepAlive: true, maxSockets: 128 }) },
});
const store = dynamodbStore({ client, table });
const opts = { leaseMs: 60_000, windowMs: 600_000 };
const won = (list: Array<{ kind: string; takeover?: boolean }>) => list.filter((c) => c.kind === 'acquired').length;

process.on('message', (message) => void (async () => {
  if (message === 'go') {
    const shared = await Promise.all(Array.from({ length: 50 }, () => store.claim({ scope: 's', key: sharedKey }, 'fp', opts)));
    const distinct = await Promise.all(Array.from({ length: Number(distinctKeys) }, (_, i) => store.claim({ scope: 's', key: `distinct-${i}` }, 'fp', opts)));
    process.send!({ shared: won(shared), distinct: won(distinct), inFlight: shared.filter((c) => c.kind === 'in_flight').length });
  } else if (message === 'take-over') {
    const claims = await Promise.all(Array.from({ length: 50 }, () => store.claim({ scope: 's', key: sharedKey }, 'fp', opts)));
    process.send!({ takeovers: claims.filter((c) => c.kind === 'acquired' && c.takeover).length, won: won(claims) }, () => {
      client.destroy();
      process.exit(0);
    });
  }
})());
process.send!('ready');
