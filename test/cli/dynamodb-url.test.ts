/**
 * The CLI's DynamoDB store URLs (issue 30, item 1): `dynamodb:`, `dynamodb:REGION` and
 * `dynamodb+http(s)://host:port`; what each refusal says; that no credential is ever printed; and
 * that `@aws-sdk/client-dynamodb` (an optional peer) is loaded only for a DynamoDB URL. The
 * commands themselves run on dynalite in store-commands.test.ts, the page in ui.test.ts.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CliUsageError } from '../../src/check/errors.js';
import { importDriver } from '../../src/cli/open/driver.js';
import { main } from '../../src/cli/run.js';
import { URL_FORMS, parseStoreUrl } from '../../src/cli/store-url.js';

// Counts the imports of the SDK by the code under test (the real module is what they get).
const sdk = vi.hoisted(() => ({ loads: 0 }));
vi.mock('@aws-sdk/client-dynamodb', async (importOriginal) => {
  sdk.loads++;
  return importOriginal();
});

// The SDK warns once per process that its releases from 2027 need Node 22; the tests run Node 20 on purpose.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
const SECRET = 'Zq9xW7kkSecret';

async function cli(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, { out: (text) => (stdout += `${text}\n`), err: (text) => (stderr += `${text}\n`), tty: false });
  return { code, stdout, stderr };
}

/** Sets environment variables for one test; `afterEach` puts them back. */
const saved = new Map<string, string | undefined>();
function setEnv(values: Record<string, string | undefined>): void {
  for (const [name, value] of Object.entries(values)) {
    if (!saved.has(name)) saved.set(name, process.env[name]);
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
}
afterEach(() => {
  for (const [name, value] of saved) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  saved.clear();
});

describe('DynamoDB store URLs', () => {
  it('takes dynamodb:, dynamodb:REGION and dynamodb+http(s)://host:port, all shown as written (nothing in them is secret)', () => {
    expect(parseStoreUrl('dynamodb:')).toEqual({ kind: 'dynamodb', shown: 'dynamodb:', target: 'dynamodb:', secrets: [] });
    expect(parseStoreUrl('dynamodb:eu-west-1')).toMatchObject({ kind: 'dynamodb', region: 'eu-west-1', shown: 'dynamodb:eu-west-1' });
    expect(parseStoreUrl('dynamodb:us-gov-west-1')).toMatchObject({ region: 'us-gov-west-1' });
    expect(parseStoreUrl('dynamodb+http://127.0.0.1:8000')).toMatchObject({ kind: 'dynamodb', endpoint: 'http://127.0.0.1:8000', shown: 'dynamodb+http://127.0.0.1:8000' });
    expect(parseStoreUrl('dynamodb+http://localhost:4566/')).toMatchObject({ endpoint: 'http://localhost:4566' });
    expect(parseStoreUrl('dynamodb+https://dynamodb.local')).toMatchObject({ endpoint: 'https://dynamodb.local' });
    expect(parseStoreUrl('DynamoDB+HTTP://[::1]:8000')).toMatchObject({ endpoint: 'http://[::1]:8000' });
    expect(parseStoreUrl('dynamodb:').region).toBeUndefined();
    expect(URL_FORMS).toMatch(/dynamodb: \(dynamodb:REGION, dynamodb\+http:\/\/host:port\)/);
  });

  it('refuses anything else, naming the forms, and never echoes what it refused', () => {
    const cases: Array<[string, RegExp]> = [
      [`dynamodb+http://AKIAEXAMPLE:${SECRET}@127.0.0.1:8000`, /^the store URL "dynamodb\+http:\/\/…" is not dynamodb\+http:\/\/host:port \(credentials, a path and options do not go in this form\)/],
      [`dynamodb+https://127.0.0.1:8000?secret=${SECRET}`, /^the store URL "dynamodb\+https:\/\/…" is not dynamodb\+https:\/\/host:port/],
      [`dynamodb+http://127.0.0.1:8000/${SECRET}`, /is not dynamodb\+http:\/\/host:port/],
      [`dynamodb:${SECRET}`, /^the store URL "dynamodb:…" is not dynamodb: or dynamodb:REGION \(an AWS region such as eu-west-1; credentials do not go in the URL\)/],
      [`dynamodb:eu-west-1?key=${SECRET}`, /is not dynamodb: or dynamodb:REGION/],
      [`dynamodb://${SECRET}`, /^the store URL "dynamodb:\/\/…" is not a form: the table is a flag \(--store dynamodb: --table NAME\), the region dynamodb:REGION/],
    ];
    for (const [url, message] of cases) {
      let error: unknown;
      try {
        parseStoreUrl(url);
      } catch (e) {
        error = e;
      }
      expect(error, url).toBeInstanceOf(CliUsageError);
      expect((error as Error).message, url).toMatch(message);
      expect((error as Error).message, url).toContain(`; expected ${URL_FORMS}`);
      expect((error as Error).message, url).not.toContain(SECRET);
    }
  });

  it('names the package to install when the SDK is missing', async () => {
    const missing = async () => {
      throw Object.assign(new Error("Cannot find package '@aws-sdk/client-dynamodb'"), { code: 'ERR_MODULE_NOT_FOUND' });
    };
    await expect(importDriver('dynamodb', missing)).rejects.toThrow(
      new CliUsageError('dynamodb store URLs need the @aws-sdk/client-dynamodb package, which is not installed: npm install @aws-sdk/client-dynamodb'),
    );
  });
});

describe('the CLI on a DynamoDB URL', () => {
  it('loads @aws-sdk/client-dynamodb only for a DynamoDB URL', async () => {
    // Every CLI module is loaded by now (main), and a SQLite command ran: no SDK.
    const sqlite = await cli(['stats', '--store', 'sqlite:/nonexistent/idemkit.db']);
    expect(sqlite.code).toBe(2);
    expect((await cli(['list', '--help'])).code).toBe(0);
    expect(sdk.loads).toBe(0);
    setEnv({ AWS_ACCESS_KEY_ID: 'AKIAEXAMPLE', AWS_SECRET_ACCESS_KEY: SECRET });
    const dynamo = await cli(['stats', '--store', 'dynamodb+http://127.0.0.1:1']);
    expect(dynamo.code).toBe(2);
    expect(sdk.loads).toBe(1);
  });

  it('says an unreachable endpoint cannot be reached, in one line, without the credentials it signed with', async () => {
    setEnv({ AWS_ACCESS_KEY_ID: 'AKIAEXAMPLE', AWS_SECRET_ACCESS_KEY: SECRET });
    const run = await cli(['list', '--store', 'dynamodb+http://127.0.0.1:1', '--table', 'records']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^idemkit list: cannot reach the store at dynamodb\+http:\/\/127\.0\.0\.1:1: .*ECONNREFUSED/);
    expect(run.stderr).not.toMatch(/\n\s+at /);
    expect(run.stderr + run.stdout).not.toContain(SECRET);
    expect(run.stderr + run.stdout).not.toContain('AKIAEXAMPLE');
  });

  it('names the fix for a missing region and for missing credentials', async () => {
    // No region anywhere (a profile that does not exist holds none either), and no credentials.
    setEnv({ AWS_REGION: undefined, AWS_DEFAULT_REGION: undefined, AWS_PROFILE: 'idemkit-test-no-such-profile', AWS_ACCESS_KEY_ID: undefined, AWS_SECRET_ACCESS_KEY: undefined, AWS_SESSION_TOKEN: undefined });
    const noRegion = await cli(['stats', '--store', 'dynamodb:']);
    expect(noRegion.code).toBe(2);
    expect(noRegion.stderr).toMatch(/^idemkit stats: cannot reach the store at dynamodb:: no AWS region: name it in the URL \(dynamodb:eu-west-1\) or set AWS_REGION$/m);
    const noCredentials = await cli(['stats', '--store', 'dynamodb:eu-west-1']);
    expect(noCredentials.code).toBe(2);
    expect(noCredentials.stderr).toMatch(/^idemkit stats: cannot reach the store at dynamodb:eu-west-1: no AWS credentials: the SDK found none in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE/m);
    // A local endpoint takes any: the message says how to give some.
    const local = await cli(['stats', '--store', 'dynamodb+http://127.0.0.1:1']);
    expect(local.stderr).toMatch(/no AWS credentials: .*DynamoDB Local and dynalite take any: AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local\)$/m);
  });

  it('refuses the flags that name nothing in a DynamoDB table', async () => {
    const prefix = await cli(['stats', '--store', 'dynamodb:eu-west-1', '--prefix', 'x']);
    expect(prefix.code).toBe(2);
    expect(prefix.stderr).toMatch(/^idemkit stats: --prefix does not apply to a dynamodb store$/m);
    const schema = await cli(['list', '--store', 'dynamodb:eu-west-1', '--schema', 'x']);
    expect(schema.stderr).toMatch(/^idemkit list: --schema does not apply to a dynamodb store$/m);
    // The store's own check of the name, as the flag's error.
    const table = await cli(['list', '--store', 'dynamodb:eu-west-1', '--table', 'a b']);
    expect(table.code).toBe(2);
    expect(table.stderr).toMatch(/^idemkit list: --table: expected 3 to 255 letters, digits/m);
  });
});
