// dynalite 4 ships no types: the part the tests use.
declare module 'dynalite' {
  import type { Server } from 'node:http';
  interface DynaliteOptions {
    readonly createTableMs?: number;
    readonly deleteTableMs?: number;
    readonly updateTableMs?: number;
    readonly path?: string;
  }
  export default function dynalite(options?: DynaliteOptions): Server;
}
