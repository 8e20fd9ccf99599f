/**
 * The Nest server of bench/server.ts (`--framework=nest`): Nest 11 on its Express platform, one
 * controller with `POST /charges` → 201 `{ id, ok: true }` (Nest's default status for POST), as
 * examples/nest.ts builds it: bare, or with `IdempotencyModule.forRoot({ store, required })` in the
 * root module and `@Idempotent()` on the controller.
 *
 * The decorators are applied as functions (as src/nest/module.ts applies its own): tsx compiles
 * the bench without type metadata, and a call says the same as the `@` form. Both sides are
 * created with `rawBody: true` (examples/nest.ts: the fingerprint hashes the bytes received), and
 * Nest's default JSON body parser parses every request.
 */
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { DynamicModule } from '@nestjs/common';
import { Controller, Headers, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { Idempotent, IdempotencyModule } from 'idemkit/nest';
import type { AppSpec } from './shared.js';
import { ROUTE } from './shared.js';

export async function startNest(spec: AppSpec): Promise<number> {
  class ChargesController {
    create(key: string | undefined): unknown {
      return spec.execute(key);
    }
  }
  if (spec.delayMs > 0) {
    ChargesController.prototype.create = async function create(key: string | undefined) {
      await sleep(spec.delayMs);
      return spec.execute(key);
    };
  }
  const prototype = ChargesController.prototype;
  // @Post(ROUTE) create(@Headers('idempotency-key') key) on @Controller() class ChargesController
  Headers('idempotency-key')(prototype, 'create', 0);
  Post(ROUTE)(prototype, 'create', Object.getOwnPropertyDescriptor(prototype, 'create')!);
  Controller()(ChargesController);
  if (spec.store) Idempotent()(ChargesController);

  const imports: DynamicModule[] = spec.store ? [IdempotencyModule.forRoot({ store: spec.store, required: spec.required })] : [];
  class AppModule {}
  Module({ imports, controllers: [ChargesController] })(AppModule);

  const app = await NestFactory.create<NestExpressApplication>(AppModule, { rawBody: true, logger: ['error', 'warn'] });
  await app.listen(0, '127.0.0.1');
  return (app.getHttpServer().address() as AddressInfo).port;
}
