import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import type { Decision, EngineOverrides, Execution, RequestReader } from '../core/engine.js';
import type { RegisteredContext } from '../core/index.js';
import { IdempotencyEngine } from '../core/engine.js';
import type { IdempotencyHttpError } from '../core/errors.js';
import { BodyTooLargeError, MountedTwiceError, PROBLEM_CONTENT_TYPE } from '../core/errors.js';
import type { IdempotencyOptions } from '../core/options.js';
import { isNullBodyStatus, replayBody, replayHeaderRecord } from '../core/response.js';
import type { RouteNaming } from '../core/route-options.js';
import { readRouteOverrides, routeEngine } from '../core/route-options.js';
import type { BodyStream } from './fastify-body.js';
import { decorateBody, requestBody, teeBody } from './fastify-body.js';
import { plainBytes, readPayload, sendable } from './fastify-response.js';
import { headerValues } from './node-headers.js';
import { watchResponse } from './node-response.js';

/**
 * A route's own settings, in its `config.idempotency`: the options that change how one request
 * is claimed and answered, each overriding the plugin's for this route. Checked when the route is
 * registered. (`false` leaves the route unprotected; `true` or nothing protects it with the
 * plugin's options.)
 */
export interface IdempotencyRouteConfig extends EngineOverrides<FastifyRequest> {
  /** Overrides the plugin's `required` for this route. */
  readonly required?: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * The idempotency context of a protected request; undefined when the request passed through.
     * Its `tx` is typed by the store registered through idemkit's `Register` (`unknown` until then).
     */
    idempotency: RegisteredContext | undefined;
  }
  interface FastifyContextConfig {
    idempotency?: boolean | IdempotencyRouteConfig;
  }
}

/** What one keyed request carries from preHandler to onSend. */
interface Pending {
  execution?: Execution;
  threw: boolean;
  tooLarge: boolean;
}

const EMPTY = Buffer.alloc(0);
// As few hooks as the work needs, since each costs every request (docs/performance.md): onError
// runs only on errors, and what an onRequest and an onResponse hook did is done in preHandler and
// by the lease keeper. preParsing keeps the body bytes of a keyed request for the fingerprint.
const HOOKS = ['preParsing', 'preHandler', 'onSend', 'onError'] as const;
const kProtected = Symbol('idemkit.fastify.route');
/** A request decoration (so every request has it from construction): its Pending, or null. */
const kPending = Symbol('idemkit.fastify.pending');

type TrackedRequest = FastifyRequest & { [kPending]: Pending | null };

/** How a route's `config.idempotency` is named in errors; the plugin-wide options are refused there. */
function routeNaming(url: string): RouteNaming {
  return {
    path: 'config.idempotency',
    suffix: ` of ${url}`,
    expected: 'true, false or an object of per-route options',
    mount: 'the plugin',
    mountHint: 'set it where the plugin is registered',
  };
}

async function plugin(fastify: FastifyInstance, options: IdempotencyOptions<FastifyRequest>): Promise<void> {
  const pluginEngine = new IdempotencyEngine<FastifyRequest>(options);
  const { header, maxBodyBytes, problemTypeBase } = pluginEngine.options;
  const headerName = header.toLowerCase();
  // Headers that describe the handler's representation; dropped when a problem replaces it.
  const entityHeaders = pluginEngine.representationHeaders;
  if (!fastify.hasRequestDecorator('idempotency')) fastify.decorateRequest('idempotency', undefined);
  // Fastify builds each request with its decorations in place: reading and writing this property
  // costs less than a WeakMap. Each plugin instance owns the requests of its own routes only.
  if (!fastify.hasRequestDecorator(kPending as unknown as string)) fastify.decorateRequest(kPending as unknown as string, null);
  const pendingOf = (request: FastifyRequest) => (request as TrackedRequest)[kPending];
  decorateBody(fastify);

  fastify.addHook('onRoute', (route) => {
    const config = route.config?.idempotency;
    if (config === false) return;
    // Only idemkit's own object is read: the rest of `config` belongs to Fastify and other plugins.
    // A route's engine is derived once, here, so that no request pays for the route's options.
    const naming = routeNaming(route.url);
    const engine = routeEngine(pluginEngine, readRouteOverrides<FastifyRequest>(config === true ? undefined : config, naming), naming);
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (!methods.some((m) => engine.covers(m))) return;
    const marked = route as RouteOptions & { [kProtected]?: true };
    if (marked[kProtected]) throw mountedTwice(route.url);
    marked[kProtected] = true;
    // Fastify reads and parses the body itself, within this limit; the fingerprint is taken from
    // what it parsed, so the body is neither buffered twice nor parsed twice.
    const bodyLimit = Math.min(route.bodyLimit ?? fastify.initialConfig.bodyLimit ?? maxBodyBytes, maxBodyBytes);
    route.bodyLimit = bodyLimit;

    // How the engine reads a request of this route: its body is what Fastify parsed, with the
    // bytes the preParsing tee kept.
    const reader: RequestReader<FastifyRequest> = {
      method: (request) => request.method,
      header: (request, name) => headerValues(request.raw, name),
      path: (request) => request.url,
      contentType: (request) => request.headers['content-type'],
      readBody: (request) => requestBody(request, bodyLimit),
    };
    const keyedRequest = (request: FastifyRequest): boolean => {
      if (!engine.covers(request.method)) return false;
      try {
        return engine.parseKey(headerValues(request.raw, headerName), false) !== undefined;
      } catch {
        return false;
      }
    };
    // Route-level hooks run after every application-level hook of the same stage, so auth,
    // rate limits and other preHandlers answer before a key is claimed.
    const hooks = {
      // Before Fastify's parser reads the body: a keyed request's bytes are kept as they pass, so
      // the fingerprint hashes what the client sent (a number's every digit) rather than what the
      // parser made of it. Requests without a key are not touched.
      preParsing(request: FastifyRequest, _reply: FastifyReply, payload: BodyStream, done: (error?: Error | null) => void) {
        if (request.headers[headerName] !== undefined && engine.covers(request.method)) teeBody(request, payload, bodyLimit);
        done();
      },

      // After schema validation: a request refused by validation never claims its key. Answering
      // here means reply.send() without done(), as Fastify's callback-style hooks do.
      preHandler(request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void) {
        if (engine.passesAtOnce(request, reader)) return done();
        engine
          .decide(request, reader)
          .then((decision) => applyDecision(decision, request, reply, done, problemTypeBase))
          // A scope hook that threw, or answering that threw: Fastify's error handling.
          .catch((error: unknown) => done(error as Error));
      },

      onError(request: FastifyRequest, _reply: FastifyReply, error: Error & { code?: string }, done: () => void) {
        const state = pendingOf(request);
        if (state?.execution) state.threw = true;
        else if (!state && error.code === 'FST_ERR_CTP_BODY_TOO_LARGE' && keyedRequest(request)) {
          // Refused before preHandler: a keyed request gets the matrix's 413 (in onSend).
          (request as TrackedRequest)[kPending] = { threw: false, tooLarge: true };
        }
        done();
      },

      onSend(request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (error: Error | null, payload?: unknown) => void) {
        const state = pendingOf(request);
        if (!state || (!state.execution && !state.tooLarge)) return done(null, payload);
        if (state.tooLarge) {
          // Fastify refused the body before anything was claimed: answer in the matrix's own words.
          state.tooLarge = false;
          const error = new BodyTooLargeError(bodyLimit);
          for (const name of entityHeaders) reply.removeHeader(name);
          reply.code(error.status).type(PROBLEM_CONTENT_TYPE);
          return done(null, JSON.stringify(error.problem(problemTypeBase)));
        }
        let finished: unknown;
        try {
          finished = finishExecution(state, reply, payload);
        } catch (error) {
          return done(error as Error);
        }
        // Answered at once when the store wrote the record inside its call (see storeAnswer).
        if (finished instanceof Promise) finished.then((result: unknown) => done(null, result), done);
        else done(null, finished);
      },
    };
    const target = route as unknown as Record<string, unknown>;
    for (const name of HOOKS) {
      const existing = target[name];
      target[name] = [...(existing === undefined ? [] : Array.isArray(existing) ? existing : [existing]), hooks[name]];
    }
  });

  /** Stores the handler's answer, then lets it out (or the engine's replacement): the payload to send, or a promise of it. */
  function finishExecution(state: Pending, reply: FastifyReply, payload: unknown): unknown {
    // A string or a Buffer (what almost every handler sends) is read without waiting a turn.
    const bytes = plainBytes(payload);
    if (bytes !== undefined) return storeAnswer(state, reply, payload, bytes);
    return readPayload(reply, payload).then(
      (read) => storeAnswer(state, reply, payload, read),
      (error: unknown) => {
        state.threw = true; // Fastify answers this error through onSend again: that answer is stored
        throw error;
      },
    );
  }

  /**
   * Completes the record, then answers: at once when the store wrote it inside its call
   * (`finishAtOnce`), so that a handler returning `reply` finds it sent; else once the store answered.
   */
  function storeAnswer(state: Pending, reply: FastifyReply, payload: unknown, read: Buffer): unknown {
    const execution = state.execution!;
    state.execution = undefined; // captured once; a later error answer passes through
    const bytes = isNullBodyStatus(reply.statusCode) ? EMPTY : read;
    const replacement = execution.finishAtOnce(reply.statusCode, reply.getHeaders(), bytes, state.threw);
    if (replacement instanceof Promise) return replacement.then((late) => answerWith(late, reply, payload, bytes));
    return answerWith(replacement, reply, payload, bytes);
  }

  /** The payload as it came (a string goes out in one write with the headers) or its bytes; or the problem replacing it. */
  function answerWith(replacement: IdempotencyHttpError | undefined, reply: FastifyReply, payload: unknown, bytes: Buffer): unknown {
    if (!replacement) return payload === null || payload === undefined || typeof payload === 'string' ? payload : bytes;
    for (const name of entityHeaders) reply.removeHeader(name);
    reply.code(replacement.status).headers(replacement.headers).type(PROBLEM_CONTENT_TYPE);
    return JSON.stringify(replacement.problem(problemTypeBase));
  }
}

/** Answers a keyed request as the engine decided, in a preHandler: `done()` lets it through to the handler. */
function applyDecision(decision: Decision<FastifyRequest>, request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void, problemTypeBase: string): void {
  switch (decision.kind) {
    case 'pass':
      return done();
    case 'replay': {
      const { response } = decision;
      reply.code(response.status).headers(replayHeaderRecord(response));
      reply.send(sendable(replayBody(response)));
      return;
    }
    case 'reject':
      sendProblem(reply, decision.error, problemTypeBase);
      return;
    case 'execute':
      (request as TrackedRequest)[kPending] = { execution: decision.execution, threw: false, tooLarge: false };
      // Typed as the application registered its store (`Register`); the engine's is untyped.
      request.idempotency = decision.execution.context as RegisteredContext;
      // A hijacked reply never reaches onSend: the keeper sees it finished and releases.
      watchResponse(decision.execution, reply.raw);
      return done();
  }
}

function sendProblem(reply: FastifyReply, error: IdempotencyHttpError, problemTypeBase: string): FastifyReply {
  return reply.code(error.status).headers(error.headers).type(PROBLEM_CONTENT_TYPE).send(JSON.stringify(error.problem(problemTypeBase)));
}

function mountedTwice(url: string): MountedTwiceError {
  return new MountedTwiceError(
    `idemkit: the idempotency plugin is registered twice for ${url} (each registration covers the routes of the context it is registered in and of its children). ` +
      'Register it once there; give a route its own options with `config: { idempotency: { … } }`, or register each group of routes with its own options inside its own `app.register(async (child) => { await child.register(idempotency, options); … })`.',
  );
}

/**
 * The Idempotency-Key decision matrix as a Fastify plugin: `app.register(idempotency, options)`.
 * It protects the routes registered after it in the same scope and its children; the scope hook
 * receives the `FastifyRequest`, so it can read what an earlier onRequest hook (auth) has set.
 */
export const idempotency: FastifyPluginAsync<IdempotencyOptions<FastifyRequest>> = Object.assign(plugin, {
  // What fastify-plugin would set, without a dependency for three properties. `skip-override`: not
  // encapsulated, so the hooks belong to the context the plugin is registered in and cover the
  // routes added next to it and in its children (sibling contexts each register their own).
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'idemkit',
  // The name other plugins' `dependencies` and `app.hasPlugin('idemkit')` see, and the Fastify
  // versions the plugin supports (checked at registration).
  [Symbol.for('plugin-meta')]: { name: 'idemkit', fastify: '5.x' },
});
export default idempotency;
