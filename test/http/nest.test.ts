import { randomUUID } from 'node:crypto';
import type { CanActivate, ExecutionContext, Type } from '@nestjs/common';
import { Controller, Header, HttpCode, HttpException, HttpStatus, Inject, Module, Param, ParseIntPipe, Post, Res, UseGuards } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { InvalidOptionError } from '../../src/core/errors.js';
import type { ContextFor, IdempotencyContext } from '../../src/core/execution.js';
import type { NestRequest } from '../../src/nest/index.js';
import { Idempotent, IdempotencyCtx, IdempotencyModule, idempotencyContext } from '../../src/nest/index.js';
import type { MemoryStore } from '../../src/stores/memory/index.js';
import { memoryStore } from '../../src/stores/memory/index.js';
import { sqliteStore } from '../../src/stores/sqlite/index.js';
import { createNestExpressApp, createNestFastifyApp, listenNest } from './apps/nest-app.js';
import type { TestApp } from './harness.js';
import { bearerToken } from './harness.js';
import { describeMatrix } from './matrix.js';

describeMatrix('nest-express', createNestExpressApp);
describeMatrix('nest-fastify', createNestFastifyApp);

// --- Nest's own ways, on both platforms (issue 18, item 1)

type Platform = 'express' | 'fastify';

/** A Nest app of `module` on `platform`, listening on an ephemeral loopback port. */
async function serve(platform: Platform, module: Type): Promise<TestApp> {
  // abortOnError: false, or Nest would exit the process on a module that fails to build.
  const options = { logger: false as const, rawBody: true, forceCloseConnections: true, abortOnError: false };
  const app =
    platform === 'express'
      ? await NestFactory.create<NestExpressApplication>(module, new ExpressAdapter(), options)
      : await NestFactory.create<NestFastifyApplication>(module, new FastifyAdapter(), options);
  return listenNest(app);
}

interface Sent {
  status: number;
  headers: Headers;
  text: string;
}

async function post(app: TestApp, path: string, init: { key?: string; token?: string; body?: unknown } = {}): Promise<Sent> {
  const headers = new Headers({ 'content-type': 'application/json' });
  if (init.token !== undefined) headers.set('authorization', `Bearer ${init.token}`);
  if (init.key !== undefined) headers.set('idempotency-key', init.key);
  const res = await fetch(app.url + path, { method: 'POST', headers, body: JSON.stringify(init.body ?? {}) });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const key = () => `key-${randomUUID()}`;
const STORE = Symbol('store');
const COUNTER = Symbol('counter');

interface Counter {
  runs: number;
}

/** Refuses a request without `authorization` (false: Nest's 403); sets `request.user` from it. */
class TokenGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined>; user?: string }>();
    const token = bearerToken(request.headers.authorization);
    if (token === undefined) return false;
    request.user = token;
    return true;
  }
}

/** No @Idempotent on the class: only the routes that carry it are protected. */
@Controller('routes')
class RoutesController {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}

  @Post('plain')
  plain() {
    return { runs: ++this.counter.runs };
  }

  @Post('optional')
  @Idempotent({ required: false })
  optional() {
    return { runs: ++this.counter.runs };
  }

  @Post('required')
  @Idempotent()
  @HttpCode(202)
  @Header('x-route', 'required')
  required() {
    return { runs: ++this.counter.runs };
  }

  @Post('payment')
  @Idempotent()
  payment() {
    this.counter.runs++;
    throw new HttpException({ error: 'card declined', runs: this.counter.runs }, HttpStatus.PAYMENT_REQUIRED);
  }

  @Post('own-answer')
  @Idempotent()
  ownAnswer(@Res() response: { status(code: number): { send(body: string): unknown } }) {
    response.status(207).send(`runs=${++this.counter.runs}`);
  }

  @Post('count/:n')
  @Idempotent()
  count(@Param('n', ParseIntPipe) n: number) {
    this.counter.runs++;
    return { n };
  }

  @Post('context')
  @Idempotent()
  context(@IdempotencyCtx() ctx: IdempotencyContext | undefined) {
    this.counter.runs++;
    return { key: ctx?.key, scope: ctx?.scope };
  }
}

/** @Idempotent on the class, and one route left out of it. */
@Idempotent()
@UseGuards(TokenGuard)
@Controller('guarded')
class GuardedController {
  constructor(@Inject(COUNTER) private readonly counter: Counter) {}

  @Post()
  create() {
    return { runs: ++this.counter.runs };
  }

  @Post('unprotected')
  @Idempotent(false)
  unprotected() {
    return { runs: ++this.counter.runs };
  }
}

@Module({ providers: [{ provide: STORE, useFactory: () => memoryStore() }], exports: [STORE] })
class StoreModule {}

describe.each(['express', 'fastify'] as const)('idemkit/nest on %s', (platform) => {
  const counter: Counter = { runs: 0 };
  let app: TestApp;
  let store: MemoryStore;

  beforeAll(async () => {
    @Module({
      imports: [
        StoreModule,
        // The store comes from DI; the scope from what the guard set (or '' where there is none).
        IdempotencyModule.forRootAsync({
          imports: [StoreModule],
          inject: [STORE],
          useFactory: (given: MemoryStore) => {
            store = given;
            return { store: given, replayHeaders: ['x-route'], scope: (request: NestRequest) => (typeof request.user === 'string' ? request.user : '') };
          },
        }),
      ],
      controllers: [RoutesController, GuardedController],
      providers: [{ provide: COUNTER, useValue: counter }],
    })
    class RootModule {}
    app = await serve(platform, RootModule);
  });
  afterEach(() => {
    counter.runs = 0;
  });
  afterAll(async () => {
    await app.close();
  });

  it('forRootAsync takes the store from DI: a route marked @Idempotent stores its answer there and replays it', async () => {
    const k = key();
    const first = await post(app, '/routes/required', { key: k });
    expect(first.status).toBe(202); // @HttpCode
    expect(first.headers.get('x-route')).toBe('required'); // @Header
    const again = await post(app, '/routes/required', { key: k });
    expect(again.status).toBe(202);
    expect(again.text).toBe(first.text);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('x-route')).toBe('required');
    expect(counter.runs).toBe(1);
    expect((await store.get({ scope: '', key: k }))?.state).toBe('completed');
  });

  it('leaves routes without @Idempotent alone, and a route may override the module (required: false)', async () => {
    const k = key();
    await post(app, '/routes/plain', { key: k });
    await post(app, '/routes/plain', { key: k });
    expect(counter.runs).toBe(2);
    expect(await store.get({ scope: '', key: k })).toBeUndefined();
    // The module requires a key; the optional route runs a keyless request, the required one refuses it.
    expect((await post(app, '/routes/optional')).status).toBe(201);
    const missing = await post(app, '/routes/required');
    expect(missing.status).toBe(400);
    expect(missing.headers.get('content-type')).toContain('application/problem+json');
    expect(JSON.parse(missing.text).type).toBe('urn:idemkit:problem:missing-key');
    expect(counter.runs).toBe(3);
  });

  it('stores an HttpException answer (thrown from the handler, sent by Nest) and replays it byte for byte', async () => {
    const k = key();
    const first = await post(app, '/routes/payment', { key: k });
    expect(first.status).toBe(402);
    expect(JSON.parse(first.text)).toEqual({ error: 'card declined', runs: 1 });
    const again = await post(app, '/routes/payment', { key: k });
    expect(again.status).toBe(402);
    expect(again.text).toBe(first.text);
    expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(counter.runs).toBe(1);
  });

  it('stores what a @Res() handler sends itself, and replays it without running the handler', async () => {
    const k = key();
    const first = await post(app, '/routes/own-answer', { key: k });
    expect(first).toMatchObject({ status: 207, text: 'runs=1' });
    const again = await post(app, '/routes/own-answer', { key: k });
    expect(again).toMatchObject({ status: 207, text: 'runs=1' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    // A conflict on a @Res() route is answered too, though Nest sends nothing for it.
    const other = await post(app, '/routes/own-answer', { key: k, body: { other: true } });
    expect(other.status).toBe(422);
    expect(counter.runs).toBe(1);
  });

  it('hands the handler its context through @IdempotencyCtx()', async () => {
    const k = key();
    const first = await post(app, '/routes/context', { key: k });
    expect(JSON.parse(first.text)).toEqual({ key: k, scope: '' });
  });

  it('runs guards first: a request the guard refuses claims nothing, and its key stays usable', async () => {
    const k = key();
    const refused = await post(app, '/guarded', { key: k });
    expect(refused.status).toBe(403);
    expect(counter.runs).toBe(0);
    expect(await store.get({ scope: '', key: k })).toBeUndefined();
    const first = await post(app, '/guarded', { key: k, token: 'tenant-a' });
    expect(first.status).toBe(201);
    const again = await post(app, '/guarded', { key: k, token: 'tenant-a' });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    // The scope hook read what the guard set on the request.
    expect((await store.get({ scope: 'tenant-a', key: k }))?.state).toBe('completed');
    expect(counter.runs).toBe(1);
  });

  it('gives the key back when a pipe refuses the request (the handler never ran): its 400 is not stored', async () => {
    const k = key();
    const refused = await post(app, '/routes/count/x', { key: k });
    expect(refused.status).toBe(400);
    expect(await store.get({ scope: '', key: k })).toBeUndefined();
    const again = await post(app, '/routes/count/x', { key: k });
    expect(again.status).toBe(400);
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    // A request the handler ran is stored as usual.
    const k2 = key();
    expect((await post(app, '/routes/count/7', { key: k2 })).status).toBe(201);
    expect((await post(app, '/routes/count/7', { key: k2 })).headers.get('idempotent-replayed')).toBe('true');
    expect(counter.runs).toBe(1);
  });

  it('@Idempotent(false) leaves one route of a protected controller unprotected', async () => {
    const k = key();
    await post(app, '/guarded/unprotected', { key: k, token: 'tenant-a' });
    const again = await post(app, '/guarded/unprotected', { key: k, token: 'tenant-a' });
    expect(again.headers.get('idempotent-replayed')).toBeNull();
    expect(counter.runs).toBe(2);
  });

  it('refuses bad options with an error naming the option: the module at create, a route value at start', async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ store: memoryStore(), leaseMs: -1 })] })
    class BadModule {}
    await expect(serve(platform, BadModule)).rejects.toThrow(/IdempotencyModule\.forRoot\(\)\.leaseMs/);

    @Controller('bad')
    class BadRouteController {
      @Post()
      @Idempotent({ inFlight: 'queue' as 'wait' })
      create() {
        return {};
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot({ store: memoryStore() })], controllers: [BadRouteController] })
    class BadRouteModule {}
    const refused = serve(platform, BadRouteModule);
    await expect(refused).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(refused).rejects.toThrow(/@Idempotent\(\)\.inFlight of BadRouteController\.create/);
  });
});

describe('@Idempotent checks its option names where it is applied', () => {
  it('refuses an unknown option, suggesting the one meant', () => {
    expect(() => Idempotent({ leseMs: 5 } as never)(class Orders {})).toThrow(/@Idempotent\(\)\.leseMs of Orders.*did you mean `leaseMs`/);
  });

  it('refuses an option of the module, saying where it belongs', () => {
    const apply = () => {
      class Orders {
        create() {}
      }
      const descriptor = Object.getOwnPropertyDescriptor(Orders.prototype, 'create')!;
      Idempotent({ store: memoryStore() } as never)(Orders.prototype, 'create', descriptor);
    };
    expect(apply).toThrow(InvalidOptionError);
    expect(apply).toThrow(/@Idempotent\(\)\.store of Orders\.create.*IdempotencyModule\.forRoot\(\)/);
  });

  it('refuses what is not true, false or an object', () => {
    expect(() => Idempotent('yes' as never)(class Orders {})).toThrow(/@Idempotent\(\) of Orders/);
  });
});

/** Compile-time only (never called): `ctx.tx` takes its type from the store, as `ContextFor` names it. */
function typesFollowTheStore(plain: ContextFor<MemoryStore, false>): void {
  const store = sqliteStore({ database: new Database(':memory:') });
  const ctx = {} as ContextFor<typeof store, true>;
  expectTypeOf(store).toEqualTypeOf<ReturnType<typeof sqliteStore<Database.Database>>>();
  expectTypeOf(ctx.tx).toEqualTypeOf<Database.Database>();
  expectTypeOf(plain.tx).toEqualTypeOf<undefined>();
  expectTypeOf(idempotencyContext({})).toEqualTypeOf<IdempotencyContext | undefined>();
}
void typesFollowTheStore;
