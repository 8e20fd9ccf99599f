/** The part of autocannon 8's programmatic API the bench uses (the package ships no types). */
declare module 'autocannon' {
  /** The request object `setupRequest` receives and returns. */
  export interface RequestParams {
    method: string;
    path: string;
    headers: Record<string, string>;
    body?: string | Buffer;
  }

  export interface RequestSpec {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    setupRequest?: (request: RequestParams, context: Record<string, unknown>) => RequestParams | null | undefined;
  }

  export interface Options {
    url: string;
    connections?: number;
    pipelining?: number;
    /** Seconds. */
    duration?: number;
    timeout?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    requests?: RequestSpec[];
  }

  export interface Histogram {
    average: number;
    mean: number;
    stddev: number;
    min: number;
    max: number;
    total: number;
    p50: number;
    p90: number;
    p97_5: number;
    p99: number;
    p99_9: number;
  }

  export interface Result {
    /** Seconds actually run. */
    duration: number;
    errors: number;
    timeouts: number;
    non2xx: number;
    /** Milliseconds. */
    latency: Histogram;
    /** Per-second samples; `total` is the number of completed requests. */
    requests: Histogram & { sent: number };
    statusCodeStats: Record<string, { count: number }>;
  }

  export default function autocannon(options: Options): Promise<Result>;
}
