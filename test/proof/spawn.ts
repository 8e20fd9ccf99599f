import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export interface ServerProcess {
  readonly url: string;
  readonly child: ChildProcess;
  /** Resolves with the signal (or exit code) once the process is gone. */
  readonly exited: Promise<NodeJS.Signals | number | null>;
  /** What the process printed on stdout so far (`instance … reclaimed <n>`, `listening <port>`). */
  output(): string;
  kill(): void;
}

const script = join(import.meta.dirname, 'server.ts');
const live = new Set<ChildProcess>();

/** Starts test/proof/server.ts (or another server script) with `env` and waits until it prints `listening <port>`. */
export async function startServer(env: Record<string, string>, serverScript = script): Promise<ServerProcess> {
  const child = fork(serverScript, [], {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  live.add(child);
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
    child.once('exit', (code, signal) => {
      live.delete(child);
      resolve(signal ?? code);
    }),
  );
  let out = '';
  const port = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /listening (\d+)/.exec(out);
      if (match) resolve(match[1]!);
    });
    void exited.then((how) => reject(new Error(`server exited (${String(how)}) before listening: ${out}`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    exited,
    output: () => out,
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) process.kill(child.pid!, 'SIGKILL');
    },
  };
}

/** Kills every server this module started and is still running (for afterAll). */
export function killAll(): void {
  for (const child of live) if (child.exitCode === null) process.kill(child.pid!, 'SIGKILL');
}

export function work(url: string, key: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${url}/work`, {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ item: 'sku-1', quantity: 1 }),
  });
}

/**
 * `work`, retried with the same key while the answer says "retry" (by default 503: the store fell
 * behind and the handler did not run; 409: the key is in flight), as a well-behaved client does,
 * until it gets the operation's answer. Each wait is a random part of a second (Retry-After may say
 * 30 s for a lease; the proofs need not wait that long). There is no cap on attempts: a cap is a
 * time budget in disguise, and a loaded machine would exhaust it; a key that never gets its answer
 * fails the test at the test's own timeout. Resolves with the answer and how many answers of each
 * status (and connections closed under a request, as `closed`) were retried.
 */
export async function workUntilAnswered(
  url: string,
  key: string,
  retryOn: ReadonlyArray<number> = [503, 409],
): Promise<{ answer: Response; retried: Record<string, number> }> {
  const retried: Record<string, number> = {};
  for (;;) {
    let answer: Response;
    try {
      answer = await work(url, key);
    } catch (error) {
      // A keep-alive connection that the server closed just as this request went out on it (its
      // idle timeout, which a busy machine reaches between two requests): nothing was answered, so
      // the client sends again with the same key, which is what the key is for.
      if (!closedConnection(error)) throw error;
      retried.closed = (retried.closed ?? 0) + 1;
      continue;
    }
    if (!retryOn.includes(answer.status)) return { answer, retried };
    retried[answer.status] = (retried[answer.status] ?? 0) + 1;
    await answer.arrayBuffer();
    await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 500));
  }
}

/** A fetch that failed because the server closed or reset the connection under the request. */
function closedConnection(error: unknown): boolean {
  const code = error instanceof TypeError ? (error.cause as { code?: string } | undefined)?.code : undefined;
  return code === 'UND_ERR_SOCKET' || code === 'ECONNRESET';
}
