// Types of the lockbroker client (index.js). Times are milliseconds.
import { EventEmitter } from 'node:events';
import type { ConnectionOptions } from 'node:tls';

/**
 * The daemon's TLS listener: tls.connect()'s options. host, port and path
 * come from ConnectOptions.address.
 */
export interface TlsOptions extends Omit<ConnectionOptions, 'host' | 'port' | 'path' | 'socket'> {
  ca?: ConnectionOptions['ca'];      // the CA that signed the daemon's certificate (PEM)
  cert?: ConnectionOptions['cert'];  // a client certificate (PEM): its CN may log in as a user
  key?: ConnectionOptions['key'];
  servername?: string;               // the name to check the certificate for; default: the address's host
}

export interface ConnectOptions {
  address?: string;        // "host:port", "host", "[v6]:port", "unix:/path", "/path"
  timeout?: number;        // connect and reply timeout, ms (default 10000)
  user?: string;           // AUTH
  password?: string;
  label?: string;          // CLIENT label
  check?: boolean;         // false: no jeopardy CHECKs
  tls?: TlsOptions;        // TLS for every connection; connect() then also PINGs
  /**
   * ms (100 to 3600000; default 5000; 0 or null: off) each hold outlives a
   * dropped connection: the daemon keeps it detached meanwhile (GRACE) and
   * the hold takes it back on a new connection (RESUME), emitting
   * 'resumed'; 'lost' when it is gone or not back by D (the send of the
   * last request answered on the lost connection + the grace - a tenth).
   * With a session the hold CHECKs at least every quarter of the grace.
   * The daemon caps it at its max_grace_ms.
   */
  grace?: number | null;
}

export interface LockOptions {
  wait?: number;           // ms; default: for ever
  shared?: boolean;
  limit?: number;
  delay?: number;          // lock-delay, ms
  signal?: AbortSignal;    // cancels the wait
  /**
   * ms (0 to 86400000) the lock stays held after its grant even when
   * released sooner: release() then asks the daemon to keep it for the rest
   * (UNLOCK keep=). Not for leases.
   */
  minHold?: number;
}

export interface ReleaseOptions {
  /**
   * ms (0 to 86400000) the daemon keeps the hold after this release; 0:
   * release at once (despite minHold). Default: what is left of minHold.
   */
  keep?: number;
}

export class LockbrokerError extends Error {
  code: string;            // 'TIMEOUT', 'BUSY', 'UNAVAILABLE', 'CONFLICT', 'NOT_HELD', ...
  line: string | null;
  /** BUSY from trylock() of one name: the STATUS asked (null if it failed), who holds it. */
  status?: Status | null;
  holder?: string | null;
  label?: string | null;
}

export class Hold extends EventEmitter {
  /** For a set: the names joined by commas. */
  readonly name: string;
  /** For a set: a token per name, in the order of the names. */
  readonly token: bigint | bigint[];
  readonly names: string[];
  readonly tokens: bigint[];
  readonly lost: boolean;
  readonly lostReason: string | null;
  readonly lostSignal: AbortSignal;
  /** Milliseconds the hold is certainly safe from now, on the monotonic clock (after a drop, never past D): decide with this. */
  safeRemaining(): number;
  /**
   * The window's end as a wall-clock time (Date.now() ms) for display only,
   * worked out at each read; a step of the wall clock moves it. null: no window.
   */
  readonly safeUntil: number | null;
  /** The session's id (16 hex digits) when the hold can be taken back after a drop; null without one. */
  readonly session: string | null;
  /** Times the hold was taken back on a new connection after a drop (event 'resumed' (count) each time). */
  readonly resumes: number;
  /** lock()'s minHold, ms; null without one. */
  readonly minHold: number | null;
  /** ms the release asked the daemon to keep the hold (0: at once); null before it or when lost. */
  readonly kept: number | null;
  /** ms of minHold still to run (0 when it has run or there is none). */
  minHoldLeft(): number;
  /**
   * UNLOCK (with keep=<ms> for what is left of minHold, or opts.keep). true:
   * released by this call; false: nothing left to release (the hold was lost,
   * see lost and lostReason, or released already). A loss never rejects, so
   * a finally keeps the error of its try.
   */
  release(opts?: ReleaseOptions): Promise<boolean>;
  [Symbol.asyncDispose](): Promise<void>;
}

export class Lease extends EventEmitter {
  readonly name: string;
  readonly token: bigint;
  readonly lost: boolean;
  readonly lostReason: string | null;
  readonly renewals: number;
  /** Milliseconds the lease certainly lasts from now, on the monotonic clock: decide with this. */
  remaining(): number;
  /**
   * The lease's end as a wall-clock time (Date.now() ms) for display only,
   * worked out at each read; a step of the wall clock moves it.
   */
  readonly deadline: number;
  renew(ttl?: number): Promise<void>;
  /**
   * UNLOCK <name> <token>. true: released by this call; false: the lease had
   * ended (see lost and lostReason) or was released already. Rejects with
   * CONNECTION_LOST when the daemon could not be asked.
   */
  release(): Promise<boolean>;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface Status {
  /** 'held' or 'free' ('queued' in holders()); `held` says the same as a boolean. */
  state: 'held' | 'free' | 'queued';
  held: boolean;
  holder: string | null; token: bigint | null; since: number | null;
  waiters: number | null; queue: number | null; mode: string; limit: number | null;
  holders: number | null; delay: number | null; lease: number | null; label: string | null;
}

export class Client {
  /** connect()'s grace, ms; null when off. */
  readonly grace: number | null;
  lock(name: string | string[], opts?: LockOptions): Promise<Hold>;
  trylock(name: string | string[], opts?: Omit<LockOptions, 'wait'>): Promise<Hold>;
  lease(name: string, ttl: number,
        opts?: { wait?: number; shared?: boolean; limit?: number; renew?: boolean }): Promise<Lease>;
  status(name: string): Promise<Status>;
  locks(glob?: string): Promise<Array<Status & { name: string }>>;
  /** HOLDERS: every holder and queued request, all daemons; state 'held' or 'queued'. */
  holders(glob?: string): Promise<Array<Status & { name: string }>>;
  stats(): Promise<Record<string, number | string>>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

export function connect(opts?: ConnectOptions): Promise<Client>;
export function checkName(name: string): void;
