/**
 * The matrix app on Lambda: a loopback HTTP server plays API Gateway (REST, HTTP API) or a
 * Function URL, in process. Each request becomes the event that service would send (the shapes
 * of @types/aws-lambda: header case kept and repeats in multiValueHeaders on REST, lower-cased
 * and comma-joined on v2; the query as parameters on REST, raw on v2; a body that is not UTF-8
 * text base64-encoded), the handler is invoked with a context, and its proxy result becomes the
 * HTTP answer (multiValueHeaders, v2 cookies as Set-Cookie, base64 bodies decoded).
 *
 * The authorizer answers 401 without a bearer token, as the harness asks, and hands the token to
 * the handler where each service puts an identity: Cognito claims (REST), JWT claims (HTTP API),
 * the IAM caller (Function URL). The `scope` hook reads it there.
 *
 * Lambda cannot stream a buffered proxy result, so `/partial` fails before its answer exists: a
 * throw, answered 500, stored and replayed like the others' failed streams.
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import middy from '@middy/core';
import type {
  APIGatewayProxyEvent,
  APIGatewayProxyEventV2WithIAMAuthorizer,
  APIGatewayProxyEventV2WithJWTAuthorizer,
  Context,
} from 'aws-lambda';
import type { IdempotencyContext } from '../../../src/core/execution.js';
import type { LambdaHttpEvent, LambdaHttpResult } from '../../../src/lambda/index.js';
import { withIdempotency } from '../../../src/lambda/index.js';
import { idempotency } from '../../../src/lambda/middy.js';
import type { AppFactory, AppState, HarnessOptions, TestApp } from '../harness.js';
import { THROWN_VALUES, bearerToken, binaryPattern, delayMs, held, sqliteContext } from '../harness.js';
import { listenServer } from './listen.js';

export type LambdaFormat = 'rest' | 'http-api' | 'function-url';

/** The time every invocation has left: Lambda's longest timeout, so the lease is the matrix's own. */
const REMAINING_MS = 900_000;

/** A Lambda context, as the runtime gives one. */
export function fakeContext(remainingMs: () => number = () => REMAINING_MS): Context {
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: 'charges',
    functionVersion: '$LATEST',
    invokedFunctionArn: 'arn:aws:lambda:eu-west-1:123456789012:function:charges',
    memoryLimitInMB: '512',
    awsRequestId: randomUUID(),
    logGroupName: '/aws/lambda/charges',
    logStreamName: '2026/12/07/[$LATEST]0123456789abcdef',
    getRemainingTimeInMillis: remainingMs,
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
}

/** The tenant each service's authorizer put in the event. */
export function tenantOf(event: LambdaHttpEvent): string {
  interface Authorizer {
    readonly claims?: { readonly sub?: string };
    readonly jwt?: { readonly claims?: { readonly sub?: string } };
    readonly iam?: { readonly userId?: string };
  }
  const authorizer = (event as { readonly requestContext?: { readonly authorizer?: Authorizer } }).requestContext?.authorizer;
  return authorizer?.claims?.sub ?? authorizer?.jwt?.claims?.sub ?? authorizer?.iam?.userId ?? '';
}

/** What an HTTP request looks like once API Gateway or a Function URL has turned it into an event. */
export interface Received {
  readonly method: string;
  readonly url: URL;
  /** rawHeaders: [name, value] pairs as the client sent them, repeats included. */
  readonly headers: ReadonlyArray<readonly [string, string]>;
  readonly body: Uint8Array;
}

const TEXTUAL = /^(?:text\/|application\/(?:[\w.+-]*\+)?(?:json|xml|x-www-form-urlencoded)\b)/i;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The body as the gateway passes it: text when textual and UTF-8, else base64. */
function gatewayBody(received: Received): { body: string | null; isBase64Encoded: boolean } {
  if (received.body.byteLength === 0) return { body: null, isBase64Encoded: false };
  const type = received.headers.find(([name]) => name.toLowerCase() === 'content-type')?.[1] ?? '';
  if (TEXTUAL.test(type)) {
    try {
      return { body: utf8.decode(received.body), isBase64Encoded: false };
    } catch {
      // Not UTF-8: base64 keeps the bytes.
    }
  }
  return { body: Buffer.from(received.body).toString('base64'), isBase64Encoded: true };
}

export function restEvent(received: Received, token: string): APIGatewayProxyEvent {
  const headers: Record<string, string> = {};
  const multiValueHeaders: Record<string, string[]> = {};
  for (const [name, value] of received.headers) {
    headers[name] = value;
    (multiValueHeaders[name] ??= []).push(value);
  }
  const query: Record<string, string> = {};
  const multiQuery: Record<string, string[]> = {};
  for (const [name, value] of received.url.searchParams) {
    query[name] = value;
    (multiQuery[name] ??= []).push(value);
  }
  const hasQuery = Object.keys(query).length > 0;
  const path = received.url.pathname;
  const { body, isBase64Encoded } = gatewayBody(received);
  return {
    resource: '/{proxy+}',
    path,
    httpMethod: received.method,
    headers,
    multiValueHeaders,
    queryStringParameters: hasQuery ? query : null,
    multiValueQueryStringParameters: hasQuery ? multiQuery : null,
    pathParameters: { proxy: path.slice(1) },
    stageVariables: null,
    body,
    isBase64Encoded,
    requestContext: {
      accountId: '123456789012',
      apiId: 'a1b2c3d4e5',
      authorizer: { claims: { sub: token } },
      domainName: 'a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com',
      domainPrefix: 'a1b2c3d4e5',
      httpMethod: received.method,
      identity: {
        accessKey: null,
        accountId: null,
        apiKey: null,
        apiKeyId: null,
        caller: null,
        clientCert: null,
        cognitoAuthenticationProvider: null,
        cognitoAuthenticationType: null,
        cognitoIdentityId: null,
        cognitoIdentityPoolId: null,
        principalOrgId: null,
        sourceIp: '127.0.0.1',
        user: null,
        userAgent: 'node',
        userArn: null,
      },
      path: `/test${path}`,
      protocol: 'HTTP/1.1',
      requestId: randomUUID(),
      requestTimeEpoch: Date.now(),
      resourceId: 'abc123',
      resourcePath: '/{proxy+}',
      stage: 'test',
    },
  };
}

export function httpApiEvent(received: Received, token: string, format: 'http-api' | 'function-url'): APIGatewayProxyEventV2WithJWTAuthorizer | APIGatewayProxyEventV2WithIAMAuthorizer {
  const headers: Record<string, string> = {};
  for (const [name, value] of received.headers) {
    const lower = name.toLowerCase();
    headers[lower] = headers[lower] === undefined ? value : `${headers[lower]},${value}`;
  }
  const query: Record<string, string> = {};
  for (const [name, value] of received.url.searchParams) query[name] = query[name] === undefined ? value : `${query[name]},${value}`;
  const { body, isBase64Encoded } = gatewayBody(received);
  const apiId = format === 'function-url' ? 'abcdefghijklmnopqrstuvwxyz012345' : 'a1b2c3d4e5';
  const domainName = format === 'function-url' ? `${apiId}.lambda-url.eu-west-1.on.aws` : `${apiId}.execute-api.eu-west-1.amazonaws.com`;
  const base = {
    version: '2.0',
    routeKey: '$default',
    rawPath: received.url.pathname,
    rawQueryString: received.url.search.slice(1),
    headers,
    ...(Object.keys(query).length > 0 ? { queryStringParameters: query } : {}),
    ...(body === null ? {} : { body }),
    isBase64Encoded,
  };
  const requestContext = {
    accountId: format === 'function-url' ? 'anonymous' : '123456789012',
    apiId,
    domainName,
    domainPrefix: apiId,
    http: { method: received.method, path: received.url.pathname, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'node' },
    requestId: randomUUID(),
    routeKey: '$default',
    stage: '$default',
    time: new Date().toISOString(),
    timeEpoch: Date.now(),
  };
  if (format === 'function-url') {
    const iam = { accessKey: 'AKIA', accountId: '123456789012', callerId: token, cognitoIdentity: null, principalOrgId: 'o-a1b2c3d4e5', userArn: `arn:aws:iam::123456789012:user/${token}`, userId: token };
    return { ...base, requestContext: { ...requestContext, authorizer: { iam } } };
  }
  return { ...base, requestContext: { ...requestContext, authorizer: { principalId: '', integrationLatency: 0, jwt: { claims: { sub: token }, scopes: [] } } } };
}

/** The HTTP answer of a proxy result. */
function send(res: ServerResponse, result: LambdaHttpResult): void {
  const headers: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(result.headers ?? {})) if (result.multiValueHeaders?.[name] === undefined) headers.push([name, String(value)]);
  for (const [name, values] of Object.entries(result.multiValueHeaders ?? {})) for (const value of values) headers.push([name, String(value)]);
  for (const cookie of result.cookies ?? []) headers.push(['set-cookie', cookie]);
  const body = result.body === undefined ? Buffer.alloc(0) : Buffer.from(result.body, result.isBase64Encoded ? 'base64' : 'utf8');
  res.writeHead(result.statusCode, [...headers.flat(), 'content-length', String(body.byteLength)]);
  res.end(body);
}

function received(req: IncomingMessage, body: Uint8Array): Received {
  const headers: Array<readonly [string, string]> = [];
  // API Gateway does not pass on hop-by-hop headers.
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    if (!/^(connection|keep-alive|transfer-encoding)$/i.test(name)) headers.push([name, req.rawHeaders[i + 1]!]);
  }
  return { method: req.method ?? 'GET', url: new URL(req.url ?? '/', 'http://gateway.test'), headers, body };
}

/** Serves `invoke` as the gateway would: one event per request, 401 from the authorizer. */
export function serveLambda(format: LambdaFormat, invoke: (event: LambdaHttpEvent, context: Context) => Promise<LambdaHttpResult>): Promise<TestApp> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const request = received(req, Buffer.concat(chunks));
      const token = bearerToken(request.headers.find(([name]) => name.toLowerCase() === 'authorization')?.[1]);
      if (token === undefined) return send(res, { statusCode: 401, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error: 'unauthorized' }) });
      const event = format === 'rest' ? restEvent(request, token) : httpApiEvent(request, token, format);
      invoke(event, fakeContext()).then(
        (result) => send(res, result),
        // An invocation error: what API Gateway answers when the function fails.
        () => send(res, { statusCode: 502, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'Internal server error' }) }),
      );
    });
  });
  return listenServer(server);
}

/** A request as the routes read it, whatever the payload version. */
interface View {
  readonly method: string;
  readonly path: string;
  readonly query: URLSearchParams;
  header(name: string): string | undefined;
  text(): string;
}

function view(event: LambdaHttpEvent): View {
  const v2 = 'rawPath' in event;
  const headers = Object.entries(event.headers ?? {});
  return {
    method: v2 ? event.requestContext.http.method : event.httpMethod,
    path: v2 ? event.rawPath : event.path,
    query: new URLSearchParams(v2 ? event.rawQueryString : Object.entries(event.queryStringParameters ?? {}).map(([k, v]) => [k, v ?? ''])),
    header: (name) => headers.find(([header]) => header.toLowerCase() === name)?.[1],
    text: () => (event.body ? Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8').toString('utf8') : ''),
  };
}

const json = (statusCode: number, value: unknown, headers: Record<string, string> = {}): LambdaHttpResult => ({
  statusCode,
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(value),
});

/** The harness's routes, as a Lambda handler. */
export function routes(state: AppState, v2: boolean) {
  return async function route(event: LambdaHttpEvent, ctx: IdempotencyContext | undefined): Promise<LambdaHttpResult> {
    const request = view(event);
    const { path, method } = request;
    if (path === '/charges' && (method === 'GET' || method === 'PUT')) {
      state.executions++;
      return json(200, { n: state.executions });
    }
    if (path === '/discard') {
      ctx?.discard();
      return json(400, { error: 'invalid' });
    }
    state.executions++;
    if (path === '/charges') {
      await delayMs(request.header('x-delay-ms'));
      await held(state, request.header('x-hold'));
      const text = request.text();
      const body = request.header('content-type')?.includes('json') ? JSON.parse(text) : text;
      const id = randomUUID();
      const result = json(201, { id, n: state.executions, body }, { location: `/charges/${id}`, 'x-request-id': randomUUID() });
      // v2 sends cookies apart; REST as a header.
      if (v2) result.cookies = ['session=secret'];
      else result.headers!['set-cookie'] = 'session=secret';
      return result;
    }
    const status = /^\/status\/(\d{3})$/.exec(path);
    if (status) return json(Number(status[1]), { error: `status ${status[1]}`, n: state.executions });
    if (path === '/throw' || path === '/partial') throw new Error('boom');
    if (path === '/binary') {
      const bytes = binaryPattern(Number(request.query.get('size') ?? 0));
      return { statusCode: 200, headers: { 'content-type': 'application/octet-stream' }, body: Buffer.from(bytes).toString('base64'), isBase64Encoded: true };
    }
    if (path === '/empty') return { statusCode: 204 };
    if (path === '/text') return { statusCode: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: `echo:${request.text()}` };
    if (path === '/tx') {
      sqliteContext(ctx).tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx!.key);
      const fail = request.query.get('fail');
      if (fail === 'throw') throw new Error('boom');
      if (fail === 'throw-value') throw THROWN_VALUES.string;
      if (fail === '500') return json(500, { error: 'failed' });
      return json(201, { ok: true });
    }
    if (path === '/tx-slow') {
      await delayMs(request.header('x-delay-ms'));
      sqliteContext(ctx).tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx!.key);
      return json(201, { ok: true });
    }
    const cancel = /^\/orders\/([^/]+)\/cancel$/.exec(path);
    if (cancel) return json(201, { order: cancel[1], status: 'cancelled', n: state.executions });
    const thrown = /^\/throw-value\/([^/]+)$/.exec(path);
    if (thrown) throw THROWN_VALUES[thrown[1]!];
    return { statusCode: 404, headers: { 'content-type': 'text/plain' }, body: 'not found' };
  };
}

/** The matrix app through `withIdempotency`, for one event format. */
export function createLambdaApp(format: LambdaFormat): AppFactory {
  return async (options: HarnessOptions, state: AppState) => {
    const route = routes(state, format !== 'rest');
    const handler = withIdempotency(async (event: LambdaHttpEvent, _context: Context, ctx) => route(event, ctx), { ...options, scope: tenantOf });
    return serveLambda(format, handler);
  };
}

/** The matrix app through the middy middleware. */
export function createMiddyApp(format: LambdaFormat): AppFactory {
  return async (options: HarnessOptions, state: AppState) => {
    const route = routes(state, format !== 'rest');
    const idem = idempotency({ ...options, scope: tenantOf });
    const handler = middy<LambdaHttpEvent, LambdaHttpResult, Error, Context>().use(idem).handler(async (event, context) => route(event, idem.context(context)));
    return serveLambda(format, (event, context) => handler(event, context));
  };
}
