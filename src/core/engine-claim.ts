// Claiming a request's record with its fingerprint, across the fingerprint settings a record may
// have been made with, and undoing a claim whose request will not run. `IdempotencyEngine.claim`
// (engine.ts) calls these and turns their answer into a decision.
import type { Deadlines } from './deadlines.js';
import { FINGERPRINT_VERSION, fingerprint, fingerprintForm } from './fingerprint.js';
import type { Claim, ClaimOptions, IdempotencyStore, RecordRef } from './store.js';
import type { RequestFacts } from './engine-request.js';

/** What claiming needs of its engine, resolved once when the engine is made. */
export interface Claiming {
  readonly store: IdempotencyStore;
  readonly deadlines: Deadlines;
  readonly claimOptions: ClaimOptions;
  /** The field lists this engine can fingerprint a retry with, by their digest (`fingerprintFields`, `previousFingerprintFields`). */
  readonly knownFields: ReadonlyMap<string, readonly string[]>;
  readonly onError: (error: unknown) => void;
}

/** A mismatch whose record was made with fingerprint settings this engine does not know. */
export interface OtherSettings {
  readonly kind: 'mismatch';
  readonly otherSettings: true;
}
const OTHER_SETTINGS: OtherSettings = Object.freeze({ kind: 'mismatch', otherSettings: true });

export const OTHER_SETTINGS_DETAIL =
  'This key was already used, and its record was made with fingerprint settings this server does not know (another `fingerprintFields`, or an earlier release), so it cannot tell whether this is the same request. Use a new key for a new operation; to get the stored answer, retry through a server with the settings the key was first used with.';

/**
 * Claims `ref` with this request's fingerprint, as the store answers it; a mismatch goes on to
 * `claimAfterMismatch`. Two steps rather than one async function around both: nearly every claim
 * ends at the first, and an async layer costs every request a promise and a turn.
 */
export function claimOnce(claiming: Claiming, ref: RecordRef, fp: string): Promise<Claim> {
  return claiming.deadlines.bound(
    claiming.store.claim(ref, fp, claiming.claimOptions),
    'claim',
    // The client already got its 503: a claim that lands later must not block its retry for a lease.
    (late) => {
      if (late.kind === 'acquired') giveBack(claiming.store, ref, late).catch(claiming.onError);
    },
  );
}

/**
 * After the store answered `claim`, a mismatch: the record may have been made with other
 * fingerprint settings (another instance, or a deploy that changed `fingerprintFields`): its
 * stored fingerprint says how it was made, and the request is checked that way. Same request by
 * the record's own measure: claimed again with the record's fingerprint, so the store decides
 * atomically as for any retry. A different request: mismatch. Settings this engine does not
 * know: mismatch, saying so.
 */
export async function claimAfterMismatch(
  claiming: Claiming,
  ref: RecordRef,
  fp: string,
  facts: RequestFacts,
  claim: Extract<Claim, { kind: 'mismatch' }>,
): Promise<Claim | OtherSettings> {
  const { store, onError } = claiming;
  let stored: string | undefined;
  try {
    stored = (await claiming.deadlines.bound(store.get(ref), 'get'))?.fingerprint;
  } catch (error) {
    // The claim's answer stands: a mismatch by this engine's settings.
    onError(error);
    return claim;
  }
  if (stored === undefined || stored === fp) return claim;
  const theirs = fingerprintLike(stored, facts, claiming.knownFields);
  if (theirs === undefined) return OTHER_SETTINGS;
  return theirs === stored ? claimOnce(claiming, ref, theirs) : claim;
}

/**
 * This request's fingerprint made the way `stored` was, or undefined when that way is unknown
 * here (another field list, an earlier release's form). A `v2:<hex>` fingerprint is the whole
 * body, or, written by a release before the form named its fields, a field list this engine
 * knows: each is tried, and a match is returned in the stored form.
 */
function fingerprintLike(stored: string, facts: RequestFacts, knownFields: ReadonlyMap<string, readonly string[]>): string | undefined {
  const form = fingerprintForm(stored);
  if (form === undefined) return undefined;
  if (form.fieldsDigest !== undefined) {
    const fields = knownFields.get(form.fieldsDigest);
    return fields === undefined ? undefined : fingerprint(facts, { fields });
  }
  const whole = fingerprint(facts);
  if (whole === stored) return whole;
  for (const fields of knownFields.values()) {
    const made = fingerprint(facts, { fields });
    const bare = `${FINGERPRINT_VERSION}:${made.slice(made.lastIndexOf(':') + 1)}`;
    if (bare === stored) return bare;
  }
  return whole;
}

/**
 * Undoes a claim whose request will not run: a new record is released, so the retry runs at
 * once. A take-over gives its lease back instead (`renew(…, 0)`): the record stays in flight with
 * the earlier owner's recovery point, and the retry takes it over and resumes there. Releasing
 * it would delete the record and its recovery point, and the retry would run from the start,
 * repeating phases that had committed (found by the model, docs/model.md).
 */
export async function giveBack(store: IdempotencyStore, ref: RecordRef, claim: Extract<Claim, { kind: 'acquired' }>): Promise<void> {
  if (claim.takeover) await store.renew(ref, claim.token, 0);
  else await store.release(ref, claim.token);
}
