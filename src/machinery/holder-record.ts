/**
 * The lock client's holder record (lua/client/record.lua): one short-lived key per live lock client that tells
 * operators who holds a lock whose hold has no holder info of its own yet (a plain lock's lean hold before its
 * first renewal, a fixed lease, which is never renewed). `inspect`, `list` and `watch` join it with the owner
 * ids by client id. It costs no command per hold: an acquire writes it only when the record might run out
 * before the hold could, with twice the lease it needs, so a stream of acquisitions writes it once per lease.
 */
import type { LockScripts } from '../redis/scripts.js';
import { monotonicNow } from '../time.js';

export class HolderRecord {
  readonly #scripts: LockScripts;
  readonly #key: string;
  readonly #label: string;
  readonly #track: (work: Promise<unknown>) => void;
  /** Monotonic ms until which the record last written lives (counted from when it was sent). */
  #expiresAt = 0;
  #written = false;

  /** `label` '': holder info is off, and no record is written. */
  constructor(scripts: LockScripts, key: string, label: string, track: (work: Promise<unknown>) => void) {
    this.#scripts = scripts;
    this.#key = key;
    this.#label = label;
    this.#track = track;
  }

  /** Before an acquire whose hold may live `leaseMs` without holder info: the record outlives it. */
  cover(leaseMs: number): void {
    if (this.#label === '') return;
    const now = monotonicNow();
    if (this.#expiresAt >= now + leaseMs) return;
    const ttlMs = 2 * leaseMs;
    this.#expiresAt = now + ttlMs;
    this.#written = true;
    this.#track(
      this.#scripts.run('client/record', [this.#key], [this.#label, ttlMs]).catch(() => {
        // Not written (a failing connection): the next acquire writes it again.
        this.#expiresAt = 0;
      }),
    );
  }

  /** At close(), once the holds are released: the record goes with them. */
  async forget(): Promise<void> {
    if (!this.#written) return;
    this.#written = false;
    this.#expiresAt = 0;
    await this.#scripts.run('client/forget-record', [this.#key], []);
  }
}
