// npm run demo — the payments service under the seed's acceptance scenarios, ending with a
// reconciliation report. The runner lives in examples/payments/demo.ts (options: --orders,
// --concurrency, --seed, --db, --keep, --report); this entry keeps `npm run demo` pointing at it.
await import('./payments/demo.js');
