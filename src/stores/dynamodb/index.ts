/**
 * `idemkit/stores/dynamodb`: the store on DynamoDB (store.ts; its claim in claim.ts, its item
 * layout in item.ts, its table in table.ts, its admin in admin.ts). The client it takes is the
 * application's own `DynamoDBClient`; `@aws-sdk/client-dynamodb` is an optional peer dependency
 * that only this subpath loads (client.ts says why).
 */
export type { DynamoDBClientLike, DynamoDBStore, DynamoDBStoreOptions } from './store.js';
export { dynamodbStore } from './store.js';
