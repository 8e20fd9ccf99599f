import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { Database } from 'better-sqlite3';
import express from 'express';
// @ts-expect-error -- `express4` is an npm alias of express@4, which ships no types of its own.
import untypedExpress4 from 'express4';
import { idempotency } from '../../../src/http/express.js';
import type { AppFactory, AppState, HarnessOptions, TestApp } from '../harness.js';
import { PARTIAL_CHUNK, THROWN_VALUES, bearerToken, binaryPattern, delayMs, held } from '../harness.js';
import { listenServer } from './listen.js';

/** Express 4 typed as Express 5: the routes below use only what both have in common. */
export const express4 = untypedExpress4 as typeof express;

async function createApp(lib: typeof express, options: HarnessOptions, state: AppState): Promise<TestApp> {
  const app = lib();
  app.set('env', 'test'); // keeps the default error handler from logging every /throw
  app.use((req, res, next) => {
    if (bearerToken(req.get('authorization')) === undefined) {
      res.status(401).json({ error: 'unauthorized' });
      return;
    }
    next();
  });
  app.use(idempotency({ ...options, scope: (req) => bearerToken(req.get('authorization')) ?? '' }));
  app.use(lib.json(), lib.text());

  app.get('/charges', (_req, res) => {
    res.json({ n: ++state.executions });
  });
  app.put('/charges', (_req, res) => {
    res.json({ n: ++state.executions });
  });
  const charge: express.RequestHandler = async (req, res) => {
    state.executions++;
    await delayMs(req.get('x-delay-ms'));
    await held(state, req.get('x-hold'));
    const body: unknown = Buffer.isBuffer(req.body) ? req.body.toString('utf8') : req.body;
    const id = randomUUID();
    res.status(201).set({ location: `/charges/${id}`, 'set-cookie': 'session=secret', 'x-request-id': randomUUID() });
    res.json({ id, n: state.executions, body });
  };
  app.post('/charges', charge);
  app.patch('/charges', charge);
  app.post('/status/:code', (req, res) => {
    state.executions++;
    const code = Number(req.params.code);
    res.status(code).json({ error: `status ${code}`, n: state.executions });
  });
  app.post('/throw', () => {
    state.executions++;
    throw new Error('boom');
  });
  app.post('/binary', (req, res) => {
    state.executions++;
    res.type('application/octet-stream').send(Buffer.from(binaryPattern(Number(req.query.size ?? 0))));
  });
  app.post('/empty', (_req, res) => {
    state.executions++;
    res.status(204).end();
  });
  app.post('/text', (req, res) => {
    state.executions++;
    res.type('text/plain; charset=utf-8').send(`echo:${String(req.body ?? '')}`);
  });
  app.post('/discard', (req, res) => {
    req.idempotency?.discard();
    res.status(400).json({ error: 'invalid' });
  });
  app.post('/tx', (req, res) => {
    state.executions++;
    const ctx = req.idempotency!;
    (ctx.tx as Database).prepare('INSERT INTO effects (key) VALUES (?)').run(ctx.key);
    if (req.query.fail === 'throw') throw new Error('boom');
    if (req.query.fail === 'throw-value') throw THROWN_VALUES.string;
    if (req.query.fail === '500') return void res.status(500).json({ error: 'failed' });
    res.status(201).json({ ok: true });
  });
  app.post('/tx-slow', (req, res, next) => {
    state.executions++;
    const ctx = req.idempotency!;
    // Express 4 ignores a handler's promise: its rejection must reach `next` by hand.
    Promise.resolve(delayMs(req.get('x-delay-ms')))
      .then(() => {
        (ctx.tx as Database).prepare('INSERT INTO effects (key) VALUES (?)').run(ctx.key);
        res.status(201).json({ ok: true });
      })
      .catch(next);
  });
  app.post('/orders/:id/cancel', (req, res) => {
    state.executions++;
    res.status(201).json({ order: req.params.id, status: 'cancelled', n: state.executions });
  });
  app.post('/throw-value/:kind', (req) => {
    state.executions++;
    throw THROWN_VALUES[req.params.kind!];
  });
  app.post('/partial', (_req, res) => {
    state.executions++;
    res.type('text/plain');
    res.write(PARTIAL_CHUNK);
    throw new Error('boom');
  });
  return { ...(await listenServer(createServer(app))), quirks: { falsyThrowIsNext: true, unparsableJsonStatus: 400 } };
}

export const createExpressApp: AppFactory = async (options, state) => createApp(express, options, state);

export const createExpress4App: AppFactory = async (options, state) => createApp(express4, options, state);
