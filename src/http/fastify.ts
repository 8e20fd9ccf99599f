import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import type { Execution, IdempotencyContext } from '../core/engine.js';
import { IdempotencyEngine } from '../core/engine.js';
import { BodyTooLargeError, IdempotencyHttpError, InvalidOptionError, PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import type { IdempotencyOptions } from '../core/options.js';
import { replayBody, replayHeaderRecord, toStoredResponse } from '../core/response.js';
import { booleanOption } from '../core/validate.js';

export type { IdempotencyContext } from '../core/engine.js';
export type { IdempotencyOptions } from '../core/options.js';

/** Per-route settings: `config: { idempotency: false }` or `config: { idempotency: { required: false } }`. */
export interface IdempotencyRouteConfig {
  /** Overrides the plugin's `required` for this route. */
  readonly required?: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The idempotency context of a protected request; undefined when the request passed through. */
    idempotency: IdempotencyContext | undefined;
  }
  interface FastifyContextConfig {
    idempotency?: false | IdempotencyRouteConfig;
  }
}

/** What one keyed request carries from preParsing to onSend. */
interface Pending {
  readonly key: string;
  readonly body: Buffer;
  execution?: Execution;
  threw: boolean;
}

const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);
const EMPTY = Buffer.alloc(0);
const HOOKS = ['preParsing', 'preHandler', 'onSend', 'onError', 'onResponse'] as const;
const kProtected = Symbol('idemkit.fastify.route');

async function plugin(fastify: FastifyInstance, options: IdempotencyOptions<FastifyRequest>): Promise<void> {
  const engine = new IdempotencyEngine<FastifyRequest>(options);
  const { header, maxBodyBytes, replayHeaders } = engine.options;
  const headerName = header.toLowerCase();
  // Headers that describe the handler's representation; dropped when a problem replaces it.
  const entityHeaders = [...replayHeaders, 'set-cookie', 'content-length', 'content-encoding'];
  const pending = new WeakMap<FastifyRequest, Pending>();

  if (!fastify.hasRequestDecorator('idempotency')) fastify.decorateRequest('idempotency', undefined);

  fastify.addHook('onRoute', (route) => {
    const config = route.config?.idempotency;
    if (config === false) return;
    if (config !== undefined && (config === null || typeof config !== 'object')) {
      throw new InvalidOptionError(`config.idempotency of ${route.url}`, 'expected false or { required?: boolean }');
    }
    const required = booleanOption(`config.idempotency.required of ${route.url}`, config?.required, engine.options.required);
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (!methods.some((m) => engine.covers(m))) return;
    const marked = route as RouteOptions & { [kProtected]?: true };
    if (marked[kProtected]) throw new Error(`idemkit: the idempotency plugin is registered twice for ${route.url}`);
    marked[kProtected] = true;

    // Route-level hooks run after every application-level hook of the same stage, so auth,
    // rate limits and other preHandlers answer before a key is claimed.
    const hooks = {
      async preParsing(request: FastifyRequest, reply: FastifyReply, payload: Readable) {
        if (!engine.covers(request.method)) return undefined;
        let key: string | undefined;
        try {
          key = engine.parseKey(request.raw.headersDistinct[headerName], required);
          if (key === undefined) return undefined;
          if (Number(request.headers['content-length']) > maxBodyBytes) throw new BodyTooLargeError(maxBodyBytes);
        } catch (error) {
          return sendProblem(reply, error);
        }
        const body = await readLimited(payload, maxBodyBytes);
        if (body === undefined) return sendProblem(reply.header('connection', 'close'), new BodyTooLargeError(maxBodyBytes));
        pending.set(request, { key, body, threw: false });
        const replayable = Readable.from(body.byteLength > 0 ? [body] : [], { objectMode: false });
        const encoded = (payload as Readable & { receivedEncodedLength?: number }).receivedEncodedLength;
        return Object.assign(replayable, { receivedEncodedLength: encoded ?? body.byteLength });
      },

      // After schema validation: a request refused by validation never claims its key.
      async preHandler(request: FastifyRequest, reply: FastifyReply) {
        const state = pending.get(request);
        if (!state) return undefined;
        const facts = { method: request.method, path: request.url, contentType: request.headers['content-type'], body: state.body };
        let admission;
        try {
          admission = await engine.admit(request, state.key, facts);
        } catch (error) {
          return sendProblem(reply, error);
        }
        switch (admission.kind) {
          case 'replay': {
            const { response } = admission;
            reply.code(response.status).headers(replayHeaderRecord(response));
            const body = replayBody(response);
            return reply.send(body.byteLength > 0 ? Buffer.from(body.buffer, body.byteOffset, body.byteLength) : undefined);
          }
          case 'reject':
            return sendProblem(reply, admission.error);
          case 'unprotected':
            return undefined;
          case 'execute':
            break;
        }
        state.execution = admission.execution;
        request.idempotency = admission.execution.context;
        return undefined;
      },

      async onError(request: FastifyRequest, _reply: FastifyReply, _error: Error) {
        const state = pending.get(request);
        if (state?.execution) state.threw = true;
      },

      async onSend(request: FastifyRequest, reply: FastifyReply, payload: unknown) {
        const state = pending.get(request);
        const execution = state?.execution;
        if (!state || !execution) return payload;
        let bytes: Buffer;
        try {
          bytes = await toBytes(await unwrapResponse(reply, payload));
        } catch (error) {
          state.threw = true; // Fastify answers this error through onSend again: that answer is stored
          throw error;
        }
        state.execution = undefined; // captured once; a later error answer passes through
        if (NULL_BODY_STATUS.has(reply.statusCode)) bytes = EMPTY;
        const stored = toStoredResponse(reply.statusCode, Object.entries(reply.getHeaders()), bytes, replayHeaders);
        const replacement = await execution.finish(stored, state.threw);
        if (!replacement) return payload === null || payload === undefined ? payload : bytes;
        for (const name of entityHeaders) reply.removeHeader(name);
        reply.code(replacement.status).headers(replacement.headers).type(PROBLEM_CONTENT_TYPE);
        return JSON.stringify(replacement.problem());
      },

      // The response went out without passing onSend (hijacked): nothing can be stored, release.
      // There is deliberately no onRequestAbort release: Node reports an abort only while the
      // body is incomplete, before any claim; and a client that leaves later does not stop the
      // handler, whose answer onSend still stores, so releasing would let its retry run twice.
      async onResponse(request: FastifyRequest) {
        const execution = pending.get(request)?.execution;
        if (execution) await execution.abort();
      },
    };
    const target = route as unknown as Record<string, unknown>;
    for (const name of HOOKS) {
      const existing = target[name];
      target[name] = [...(existing === undefined ? [] : Array.isArray(existing) ? existing : [existing]), hooks[name]];
    }
  });

  function sendProblem(reply: FastifyReply, error: unknown): FastifyReply {
    if (!(error instanceof IdempotencyHttpError)) throw error;
    return reply.code(error.status).headers(error.headers).type(PROBLEM_CONTENT_TYPE).send(JSON.stringify(error.problem()));
  }
}

/** Reads a request body up to `limit` bytes; undefined past it (reading stops there). */
function readLimited(payload: Readable, limit: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = () => {
      payload.off('data', onData);
      payload.off('end', onEnd);
      payload.off('error', onFail);
    };
    const onData = (chunk: Buffer | string) => {
      const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += buffer.byteLength;
      if (size > limit) {
        cleanup();
        payload.resume(); // drain the rest so the 413 can be written
        resolve(undefined);
      } else chunks.push(buffer);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, size));
    };
    const onFail = (error: Error & { statusCode?: number }) => {
      cleanup();
      if (!(typeof error.statusCode === 'number' && error.statusCode >= 400)) error.statusCode = 400;
      reject(error);
    };
    payload.on('data', onData);
    payload.on('end', onEnd);
    payload.on('error', onFail);
  });
}

/** A fetch `Response` sent through Fastify: apply its status and headers, keep its body. */
async function unwrapResponse(reply: FastifyReply, payload: unknown): Promise<unknown> {
  if (payload === null || typeof payload !== 'object' || Object.prototype.toString.call(payload) !== '[object Response]') return payload;
  const response = payload as Response;
  reply.code(response.status);
  for (const [name, value] of response.headers) reply.header(name, value);
  return response.body;
}

/** The bytes of an onSend payload: a string, a Buffer, nothing, or a stream (read to its end). */
async function toBytes(payload: unknown): Promise<Buffer> {
  if (payload === null || payload === undefined) return EMPTY;
  if (typeof payload === 'string') return Buffer.from(payload);
  if (payload instanceof Uint8Array) return Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
  if (typeof payload === 'object' && Symbol.asyncIterator in payload) {
    const chunks: Buffer[] = [];
    for await (const chunk of payload as AsyncIterable<Uint8Array | string>) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
    return Buffer.concat(chunks);
  }
  throw new TypeError(`idemkit: cannot store a response payload of type ${typeof payload}`);
}

/**
 * The Idempotency-Key decision matrix as a Fastify plugin: `app.register(idempotency, options)`.
 * It protects the routes registered after it in the same scope and its children; the scope hook
 * receives the `FastifyRequest`, so it can read what an earlier onRequest hook (auth) has set.
 */
export const idempotency = fp<IdempotencyOptions<FastifyRequest>>(plugin, { name: 'idemkit', fastify: '5.x' });
export default idempotency;
