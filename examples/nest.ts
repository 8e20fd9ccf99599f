// npm run example:nest — NestJS (Express platform) with idemkit's module and @Idempotent.
import { randomUUID } from 'node:crypto';
import type { CanActivate, ExecutionContext } from '@nestjs/common';
import { BadRequestException, Body, Controller, Module, Post, UnauthorizedException, UseGuards } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { IdempotencyContext } from 'idemkit';
import { Idempotent, IdempotencyCtx, IdempotencyModule } from 'idemkit/nest';
import { delay, leaseMs, port, storeFromUrl, tenantOf } from './store.js';

interface TenantRequest {
  headers: Record<string, string | undefined>;
  tenant?: string;
}

/** Authentication as a guard: guards run before idemkit's interceptor, so a 401 never claims a key. */
class TenantGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<TenantRequest>();
    const tenant = tenantOf(request.headers.authorization);
    if (!tenant) throw new UnauthorizedException({ error: 'unauthorized' });
    request.tenant = tenant;
    return true;
  }
}

@Controller('charges')
@UseGuards(TenantGuard)
@Idempotent()
class ChargesController {
  @Post()
  async create(@Body() fields: unknown, @IdempotencyCtx() ctx: IdempotencyContext | undefined) {
    if (typeof fields !== 'object' || fields === null || Array.isArray(fields)) {
      ctx?.discard(); // nothing happened: the key may be reused with a corrected body
      throw new BadRequestException({ error: 'the body must be a JSON object' });
    }
    await delay();
    return { id: randomUUID(), ...fields };
  }
}

const store = await storeFromUrl();

@Module({
  imports: [IdempotencyModule.forRoot({ store, scope: (request) => String(request.tenant), leaseMs })],
  controllers: [ChargesController],
})
class AppModule {}

// rawBody: the fingerprint hashes the bytes the client sent, every digit of a number included.
const app = await NestFactory.create(AppModule, { rawBody: true, logger: ['error', 'warn'] });
await app.listen(port, '127.0.0.1');
console.log(`listening on ${(await app.getUrl()).replace('[::1]', '127.0.0.1')}`);
process.on('SIGTERM', () => void app.close());
