import { describe, expect, it } from 'vitest';
import { PEERS, notApplicable } from '../../bench/peers/applicability.js';

describe('bench peers: where each can be measured', () => {
  it('runs no peer on Koa or Nest, with a reason for each', () => {
    for (const peer of PEERS) {
      for (const framework of ['koa', 'nest'] as const) {
        for (const store of ['memory', 'redis'] as const) expect(notApplicable(peer, framework, store), `${peer} on ${framework}/${store}`).toMatch(/\w/);
      }
    }
    expect(notApplicable('node-idempotency', 'nest', 'redis')).toMatch(/@node-idempotency\/nestjs/);
    expect(notApplicable('express-idempotency', 'koa', 'redis')).toBe('Express middleware only');
  });

  it('measures bare and idemkit everywhere, and the peers where their adapters are', () => {
    for (const framework of ['fastify', 'express', 'koa', 'nest'] as const) {
      expect(notApplicable('bare', framework, 'none')).toBeUndefined();
      expect(notApplicable('idemkit', framework, 'sqlite')).toBeUndefined();
    }
    expect(notApplicable('node-idempotency', 'fastify', 'memory')).toBeUndefined();
    expect(notApplicable('node-idempotency', 'express', 'postgres')).toBe('adapters for memory and Redis only');
    expect(notApplicable('express-idempotency', 'express', 'redis')).toBeUndefined();
    expect(notApplicable('express-idempotency', 'fastify', 'redis')).toBe('Express middleware only');
    expect(notApplicable('powertools', 'fastify', 'redis')).toBeUndefined();
    expect(notApplicable('powertools', 'express', 'memory')).toMatch(/Redis/);
  });
});
