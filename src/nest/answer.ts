import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

type Callback = () => void;

/**
 * Sends `answer` (a replay, or a problem) in place of what Nest sends for a route whose handler
 * did not run. Nest still replies after the interceptor (with the empty value it returned, under
 * the route's own status), and its exception filters and other interceptors may run too: what
 * they write is swallowed, and at their `end` the response gets the headers it had when idemkit
 * decided (CORS, say; Fastify's reply headers included) but those of a representation (`drop`),
 * and then `answer`. Only the Node
 * response's own methods are shadowed, and only until that `end`.
 */
export function answerInstead(response: object, res: ServerResponse, drop: readonly string[], answer: (res: ServerResponse) => void): void {
  const before: OutgoingHttpHeaders = Object.assign({}, (response as { getHeaders?: () => OutgoingHttpHeaders }).getHeaders?.(), res.getHeaders());
  // What describes a representation (the handler's, which is not sent) goes; the answer sets its own.
  for (const name of [...drop, 'content-type']) delete before[name];
  const own = res as unknown as Record<string, unknown>;
  const names = ['writeHead', 'write', 'end', 'flushHeaders'] as const;
  const restore = () => {
    for (const name of names) delete own[name];
  };
  own.writeHead = () => res;
  own.flushHeaders = () => {};
  own.write = (_chunk: unknown, encoding?: unknown, callback?: unknown) => {
    const cb = typeof encoding === 'function' ? encoding : callback;
    if (typeof cb === 'function') process.nextTick(cb as Callback);
    return true;
  };
  own.end = (...args: unknown[]) => {
    restore();
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    for (const [name, value] of Object.entries(before)) if (value !== undefined) res.setHeader(name, value);
    const callback = args.find((arg): arg is Callback => typeof arg === 'function');
    if (callback !== undefined) res.once('finish', callback);
    answer(res);
    return res;
  };
}
