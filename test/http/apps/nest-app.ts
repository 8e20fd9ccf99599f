import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import type { CanActivate, ExecutionContext, INestApplication } from '@nestjs/common';
import { Body, Controller, Get, Header, HttpCode, Inject, Module, Param, Patch, Post, Put, Query, Req, Res, StreamableFile, UnauthorizedException } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import type { IdempotencyContext } from '../../../src/core/execution.js';
import { Idempotent, IdempotencyCtx, IdempotencyModule } from '../../../src/nest/index.js';
import type { AppFactory, AppState, HarnessOptions, TestApp } from '../harness.js';
import { PARTIAL_CHUNK, THROWN_VALUES, bearerToken, binaryPattern, delayMs, held, sqliteContext } from '../harness.js';

/** The app's state, injected by token: vitest's transform emits no constructor parameter types. */
export const STATE = Symbol('harness state');

/** What a route needs of either platform's response (Express's `Response`, Fastify's `FastifyReply`). */
interface PlatformResponse {
  status(code: number): unknown;
  header(name: string, value: string): unknown;
}

interface PlatformRequest {
  readonly headers: Record<string, string | string[] | undefined>;
}

const header = (request: PlatformRequest, name: string) => request.headers[name] as string | undefined;

/** The auth step, as a Nest guard: guards run before every interceptor, idemkit's included. */
class BearerGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<PlatformRequest>();
    if (bearerToken(header(request, 'authorization')) === undefined) throw new UnauthorizedException({ error: 'unauthorized' });
    return true;
  }
}

/** The body as the harness describes it: parsed when JSON, else the text. */
function bodyOf(body: unknown): unknown {
  return Buffer.isBuffer(body) ? body.toString('utf8') : body;
}

@Idempotent()
@Controller()
export class HarnessController {
  constructor(@Inject(STATE) private readonly state: AppState) {}

  @Get('charges')
  listCharges() {
    return { n: ++this.state.executions };
  }

  @Put('charges')
  putCharges() {
    return { n: ++this.state.executions };
  }

  @Post('charges')
  createCharge(@Req() request: PlatformRequest, @Body() body: unknown, @Res({ passthrough: true }) response: PlatformResponse) {
    return this.charge(request, body, response);
  }

  @Patch('charges')
  @HttpCode(201)
  patchCharge(@Req() request: PlatformRequest, @Body() body: unknown, @Res({ passthrough: true }) response: PlatformResponse) {
    return this.charge(request, body, response);
  }

  private async charge(request: PlatformRequest, body: unknown, response: PlatformResponse) {
    this.state.executions++;
    await delayMs(header(request, 'x-delay-ms'));
    await held(this.state, header(request, 'x-hold'));
    const id = randomUUID();
    response.header('location', `/charges/${id}`);
    response.header('set-cookie', 'session=secret');
    response.header('x-request-id', randomUUID());
    return { id, n: this.state.executions, body: bodyOf(body) };
  }

  @Post('status/:code')
  status(@Param('code') code: string, @Res({ passthrough: true }) response: PlatformResponse) {
    this.state.executions++;
    response.status(Number(code));
    return { error: `status ${Number(code)}`, n: this.state.executions };
  }

  @Post('throw')
  throws() {
    this.state.executions++;
    throw new Error('boom');
  }

  @Post('binary')
  @HttpCode(200)
  binary(@Query('size') size?: string) {
    this.state.executions++;
    return new StreamableFile(Buffer.from(binaryPattern(Number(size ?? 0))), { type: 'application/octet-stream' });
  }

  @Post('empty')
  @HttpCode(204)
  empty() {
    this.state.executions++;
  }

  @Post('text')
  @HttpCode(200)
  @Header('content-type', 'text/plain; charset=utf-8')
  text(@Body() body: unknown) {
    this.state.executions++;
    return `echo:${String(bodyOf(body) ?? '')}`;
  }

  @Post('discard')
  @HttpCode(400)
  discard(@IdempotencyCtx() ctx: IdempotencyContext | undefined) {
    ctx?.discard();
    return { error: 'invalid' };
  }

  @Post('tx')
  tx(@IdempotencyCtx() context: IdempotencyContext | undefined, @Query('fail') fail: string | undefined, @Res({ passthrough: true }) response: PlatformResponse) {
    this.state.executions++;
    const ctx = sqliteContext(context);
    ctx.tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx.key);
    if (fail === 'throw') throw new Error('boom');
    if (fail === 'throw-value') throw THROWN_VALUES.string;
    if (fail === '500') {
      response.status(500);
      return { error: 'failed' };
    }
    return { ok: true };
  }

  @Post('tx-slow')
  async txSlow(@IdempotencyCtx() context: IdempotencyContext | undefined, @Req() request: PlatformRequest) {
    this.state.executions++;
    const ctx = sqliteContext(context);
    await delayMs(header(request, 'x-delay-ms'));
    ctx.tx.prepare('INSERT INTO effects (key) VALUES (?)').run(ctx.key);
    return { ok: true };
  }

  @Post('orders/:id/cancel')
  cancel(@Param('id') id: string) {
    this.state.executions++;
    return { order: id, status: 'cancelled', n: this.state.executions };
  }

  @Post('throw-value/:kind')
  throwValue(@Param('kind') kind: string) {
    this.state.executions++;
    throw THROWN_VALUES[kind];
  }

  /** Nest's own idiom for a streamed body: a StreamableFile, whose stream fails after its first chunk. */
  @Post('partial')
  @HttpCode(200)
  partial() {
    this.state.executions++;
    const stream = Readable.from(
      (async function* () {
        yield Buffer.from(PARTIAL_CHUNK);
        throw new Error('boom');
      })(),
    );
    return new StreamableFile(stream, { type: 'text/plain' });
  }
}

/** The root module of one app: the harness's routes, the guard, idemkit with the given options. */
function rootModule(options: HarnessOptions, state: AppState) {
  @Module({
    imports: [IdempotencyModule.forRoot({ ...options, scope: (request) => bearerToken(request.headers.authorization) ?? '' })],
    controllers: [HarnessController],
    providers: [
      { provide: STATE, useValue: state },
      { provide: APP_GUARD, useClass: BearerGuard },
    ],
  })
  class RootModule {}
  return RootModule;
}

/** Listens on an ephemeral loopback port; `close` ends kept-alive connections too. */
export async function listenNest(app: INestApplication): Promise<TestApp> {
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { url, close: () => app.close() };
}

export const createNestExpressApp: AppFactory = async (options, state) => {
  // rawBody: the fingerprint hashes the bytes the client sent (a number's every digit).
  const app = await NestFactory.create<NestExpressApplication>(rootModule(options, state), new ExpressAdapter(), {
    logger: false,
    rawBody: true,
    forceCloseConnections: true,
  });
  app.useBodyParser('text');
  return { ...(await listenNest(app)), quirks: { failedStreamStatus: 400, unparsableJsonStatus: 400 } };
};

export const createNestFastifyApp: AppFactory = async (options, state) => {
  const app = await NestFactory.create<NestFastifyApplication>(rootModule(options, state), new FastifyAdapter(), {
    logger: false,
    rawBody: true,
    forceCloseConnections: true,
  });
  // text/plain has Fastify's string parser; anything else that is not JSON arrives as a Buffer.
  app
    .getHttpAdapter()
    .getInstance()
    .addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
  return { ...(await listenNest(app)), quirks: { unparsableJsonStatus: 400 } };
};
