// The Lambda shapes idemkit reads and writes, declared structurally (the shapes of
// @types/aws-lambda's APIGatewayProxyEvent, APIGatewayProxyEventV2 and their results, reduced to
// the fields used): the package takes no dependency on AWS's types or runtime.

/** The invocation context: only the time left is read. */
export interface LambdaContext {
  getRemainingTimeInMillis(): number;
}

/** An API Gateway REST API (payload 1.0) event, as much of it as idemkit reads. */
interface RestEvent {
  readonly httpMethod: string;
  readonly path: string;
  readonly headers?: Readonly<Record<string, string | undefined>> | null;
  readonly multiValueHeaders?: Readonly<Record<string, readonly string[] | undefined>> | null;
  readonly queryStringParameters?: Readonly<Record<string, string | undefined>> | null;
  readonly multiValueQueryStringParameters?: Readonly<Record<string, readonly string[] | undefined>> | null;
  readonly body?: string | null;
  readonly isBase64Encoded?: boolean;
  readonly requestContext?: unknown;
}

/** An HTTP API (payload 2.0) or Function URL event, as much of it as idemkit reads. */
interface HttpApiEvent {
  readonly version?: string;
  readonly rawPath: string;
  readonly rawQueryString?: string;
  readonly headers?: Readonly<Record<string, string | undefined>> | null;
  readonly body?: string;
  readonly isBase64Encoded?: boolean;
  readonly requestContext: { readonly http: { readonly method: string } };
}

/**
 * An HTTP event: API Gateway REST (v1), HTTP API (v2) or a Function URL (v2 format). The
 * `scope` hook receives the whole event (authorizer claims are in `requestContext`).
 */
export type LambdaHttpEvent = RestEvent | HttpApiEvent;

/**
 * What an HTTP handler returns: API Gateway's proxy result (v1 and v2 alike; `cookies` is v2's,
 * `multiValueHeaders` v1's). A body that is not text is base64 with `isBase64Encoded: true`.
 */
export interface LambdaHttpResult {
  statusCode: number;
  headers?: Record<string, string | number | boolean> | undefined;
  multiValueHeaders?: Record<string, Array<string | number | boolean>> | undefined;
  cookies?: string[] | undefined;
  body?: string | undefined;
  isBase64Encoded?: boolean | undefined;
}

/** True for the 2.0 payload (HTTP API, Function URL), whose method and path are elsewhere. */
export function isHttpApi(event: LambdaHttpEvent): event is HttpApiEvent {
  return typeof (event as HttpApiEvent).rawPath === 'string';
}
