'use strict';
/**
 * lockbroker - a client for lockbrokerd, the lock broker (proto/PROTOCOL.md).
 * No dependencies; Node 18+. Times on the API are milliseconds, as on the wire.
 *
 *   const lb = require('lockbroker');
 *   const client = await lb.connect({ address: '127.0.0.1:7411' });
 *   const hold = await client.lock('deploy', { wait: 30000 });
 *   try {
 *     await step(hold.token);          // a BigInt fencing token
 *     if (hold.lost) throw new Error('lock lost: ' + hold.lostReason);
 *   } finally {
 *     await hold.release();
 *   }
 *   await client.close();
 *
 * Design (README.md): every hold has a connection of its own (the protocol
 * ties a hold to its connection; a cleanly released hold's connection
 * serves the next one). Each connection reads every line, so a pushed
 * LOST marks its hold lost at once. Jeopardy: a hold sends `CHECK` every
 * quarter of its safe window (at least every second, halfway through a
 * window too short for that) and is lost when the window runs out without
 * a fresh answer. A grant whose first CHECK promises no time (0: a daemon
 * just back from a ZooKeeper outage, say) is no grant: lock() releases it
 * and asks again while its wait lasts, then rejects with TIMEOUT (trylock:
 * BUSY); a hold it resolves to had a window. Leases renew themselves every
 * third of their ttl. A hold outlives a dropped connection for a grace
 * (connect({ grace }), ms, default 5000; 0 or null: off): its connection
 * sends `GRACE <ms>` after its login, and when it drops the hold reconnects
 * (at once, then 50 ms later, doubling to 1 s between tries), logs in
 * again, sends `RESUME` and CHECKs every name; it is lost if RESUME or a
 * CHECK says NOT_HELD, if its window runs out first, or if it is not back
 * by D: the daemon counts its grace from when it saw the connection end,
 * which may be before we notice, but not before it answered the last
 * request answered on it, so D = that request's send + the grace - a tenth
 * (PROTOCOL.md, What a client may assume after a drop); no try goes on
 * past D, a drop noticed after it is lost at once, and a CHECK unanswered
 * by D is a loss. With a session the CHECKs come at least every quarter of
 * the grace; with check: false, D counts from whatever was last answered
 * (the LOCK). A daemon without GRACE (ERR
 * BAD_COMMAND): a dropped connection loses its hold, as before. A minimum hold
 * (lock(name, { minHold })): a hold released sooner than minHold after its
 * grant is released with `UNLOCK <name> keep=<ms left>`, and the daemon
 * keeps it for the rest (PROTOCOL.md, Releasing later). TLS
 * (connect({ address, tls: { ca, cert, key } })): every connection the
 * client opens is a tls.connect() with those options, checked against the
 * CA and the address's host (or tls.servername).
 *
 * Clocks: every window, deadline and timeout is counted on the monotonic
 * clock (performance.now(); setTimeout's timers are monotonic too), which
 * an NTP step of the wall clock does not move: the daemon promises a window
 * from the send of a CHECK "on the client's own clock" (PROTOCOL.md, CHECK),
 * and a step back of Date.now() would stretch it. Date.now() is read only
 * for Hold.safeUntil and Lease.deadline, wall-clock times for display.
 */

const net = require('node:net');
const tls = require('node:tls');
const { EventEmitter } = require('node:events');
const { performance } = require('node:perf_hooks');

const DEFAULT_ADDRESS = '127.0.0.1:7411';
// PROTOCOL.md, "Lock names"; tests/e2e/lbnames.py holds this to that text.
const NAME_RE = /^[A-Za-z0-9._:@-]{1,200}$/;
const CHECK_EVERY_MIN = 100;
const CHECK_EVERY_MAX = 1000;
// A grant with no window (CHECK answered 0) is given back and asked for
// again this many ms later, doubling up to RETRY_MAX, while the wait lasts.
const RETRY_MIN = 100;
const RETRY_MAX = 1000;
const IDLE_MAX = 8;
const DEFAULT_GRACE = 5000;    // ms a hold outlives a dropped connection
// Taking a hold back after a drop: at once, then this long after a failed
// try, doubling up to RESUME_PAUSE_MAX, as `lockbroker run` does.
const RESUME_PAUSE_MIN = 50;
const RESUME_PAUSE_MAX = 1000;
const QUIT_WAIT = 1000;        // ms Conn.quit() waits for BYE at most
const SESSION_RE = /^OK ([0-9a-f]{16}) ([0-9a-f]{32})$/;
// Hold.check()'s answer when the connection dropped: the hold is being taken back.
const DROPPED = Symbol('dropped');
const KEEP_MAX = 86400000;     // UNLOCK's keep=<ms> goes to 24 hours
const asyncDispose = Symbol.asyncDispose || Symbol.for('nodejs.asyncDispose');

/** Resolves after ms, or rejects with signal's reason once it aborts. */
function pauseFor(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Every failure: .code ('TIMEOUT', 'BUSY', 'UNAVAILABLE', ...) and .line (the reply). */
class LockbrokerError extends Error {
  constructor(code, message, line) {
    super(message);
    this.name = 'LockbrokerError';
    this.code = code;
    this.line = line === undefined ? null : line;
  }
}

const ERR_CODES = new Set(['UNAVAILABLE', 'CONFLICT', 'NOT_HELD', 'NOAUTH', 'DENIED',
  'AUTH_FAILED', 'BAD_NAME', 'LIMIT']);

function errorOf(line, what) {
  const parts = line.split(' ');
  const code = parts[0] === 'ERR' && ERR_CODES.has(parts[1]) ? parts[1] : 'PROTOCOL';
  return new LockbrokerError(code, `${what}: ${line}`, line);
}

/** Throws a BAD_NAME error unless name is a valid lock name. */
function checkName(name) {
  if (typeof name !== 'string' || !NAME_RE.test(name) || name === '.' || name === '..') {
    throw new LockbrokerError('BAD_NAME', `invalid lock name ${JSON.stringify(name)}: ` +
      '1 to 200 bytes of A-Z a-z 0-9 . _ : @ -, not . or ..');
  }
}

/** { path } or { host, port } for "host:port", "host", "[v6]:port", "unix:/path", "/path". */
function parseAddress(address) {
  if (address.startsWith('unix:')) return { path: address.slice(5) };
  if (address.startsWith('/')) return { path: address };
  let m = /^\[([^\]]+)\](?::(\d+))?$/.exec(address);
  if (m) return { host: m[1], port: Number(m[2] || 7411) };
  m = /^(.*):(\d+)$/.exec(address);
  if (m) return { host: m[1], port: Number(m[2]) };
  return { host: address, port: 7411 };
}

/** ms as a keep or a minHold: a number from 0 to KEEP_MAX; throws a RangeError otherwise. */
function checkKeep(ms, what) {
  if (typeof ms !== 'number' || !(ms >= 0 && ms <= KEEP_MAX)) {
    throw new RangeError(`${what} must be 0 to ${KEEP_MAX} ms`);
  }
  return ms;
}

function options({ shared, limit, delay, ttl } = {}) {
  const out = [];
  if (shared && limit != null) throw new TypeError('shared and limit exclude each other');
  if (shared) out.push('shared');
  if (limit != null) {
    if (!(Number.isInteger(limit) && limit >= 1 && limit <= 65535)) {
      throw new RangeError('limit must be an integer from 1 to 65535');
    }
    out.push(`limit=${limit}`);
  }
  if (ttl != null) out.push(`ttl=${Math.round(ttl)}`);
  if (delay != null) out.push(`delay=${Math.round(delay)}`);
  return out;
}

function fields(words) {
  const out = {};
  for (const w of words) {
    const i = w.indexOf('=');
    if (i > 0) out[w.slice(0, i)] = w.slice(i + 1);
  }
  return out;
}

/**
 * Why a TLS connection failed, in a sentence, or null for an error that is
 * not TLS's. OpenSSL's errors (code ERR_SSL_...) carry the alert the broker
 * sent in .reason ('tlsv1 alert unknown ca': it did not take our
 * certificate, or our lack of one); a certificate that did not verify is an
 * error without a syscall from the handshake.
 */
function tlsWhy(e, handshaking) {
  if (typeof e.code === 'string' && e.code.startsWith('ERR_SSL_')) {
    const text = e.reason || e.message;
    return /alert/.test(text) ? `TLS: the broker refused the session: ${text}` : `TLS: ${text}`;
  }
  if (handshaking && !e.syscall) {
    return `TLS: the broker's certificate did not verify (${e.message}): check the CA and the host name`;
  }
  return null;
}

/** One connection: pushed LOST lines go to onLost; replies answer requests in order. */
class Conn {
  constructor(socket, timeout) {
    this.socket = socket;
    this.timeout = timeout;
    this.buf = '';
    this.waiting = [];        // { resolve, reject, timer } in request order
    this.unclaimed = [];      // lines nobody waits for yet (the rest of LOCKS, STATS)
    this.discard = 0;         // late replies of requests that timed out
    this.closedWhy = null;
    this.onLost = null;       // (name, token, reason); name null: the connection ended
    this.session = null;      // { id, secret } of GRACE or RESUME
    // The send time (performance.now()) of the last request answered, or
    // null: the daemon cannot have seen this connection end before it.
    this.answeredSent = null;
    socket.setNoDelay(true);
    socket.setEncoding('ascii');
    socket.on('data', (d) => this.onData(d));
    socket.on('error', (e) => this.end(tlsWhy(e, false) || `connection error: ${e.message}`));
    socket.on('close', () => this.end('the broker closed the connection'));
  }

  /**
   * Connects to address; with tlsOptions (tls.connect()'s: ca, cert, key,
   * servername, ...), over TLS, resolved once the handshake is done. The
   * address gives host and port: the broker's certificate is checked for
   * that host unless tlsOptions.servername names another.
   */
  static open(address, timeout, tlsOptions) {
    return new Promise((resolve, reject) => {
      const where = parseAddress(address);
      const socket = tlsOptions ? tls.connect({ ...tlsOptions, ...where }) : net.connect(where);
      const ready = tlsOptions ? 'secureConnect' : 'connect';
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new LockbrokerError('CONNECTION_LOST', `cannot connect to ${address}: timed out`));
      }, timeout);
      socket.once(ready, () => {
        clearTimeout(timer);
        socket.removeAllListeners('error');
        resolve(new Conn(socket, timeout));
      });
      socket.once('error', (e) => {
        clearTimeout(timer);
        socket.destroy();
        const why = (tlsOptions && tlsWhy(e, true)) || e.message;
        reject(new LockbrokerError('CONNECTION_LOST', `cannot connect to ${address}: ${why}`));
      });
    });
  }

  onData(data) {
    this.buf += data;
    let i;
    while ((i = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, i).replace(/\r$/, '');
      this.buf = this.buf.slice(i + 1);
      if (line.startsWith('LOST ')) {
        const p = line.split(' ');
        if (this.onLost && p.length >= 4) this.onLost(p[1], p[2], p.slice(3).join(' '));
        continue;
      }
      if (this.discard > 0) {
        this.discard--;
        continue;
      }
      const w = this.waiting.shift();
      if (w) {
        clearTimeout(w.timer);
        w.resolve(line);
      } else {
        this.unclaimed.push(line);
      }
    }
  }

  end(why) {
    if (this.closedWhy !== null) return;
    this.closedWhy = why;
    for (const w of this.waiting.splice(0)) {
      clearTimeout(w.timer);
      w.reject(new LockbrokerError('CONNECTION_LOST', why));
    }
    if (this.onLost) this.onLost(null, null, why);
  }

  get closed() { return this.closedWhy !== null; }

  /** Sends line; resolves to the reply. timeout: ms, null for ever, undefined: the connection's. */
  request(line, timeout) {
    if (this.closedWhy !== null) {
      return Promise.reject(new LockbrokerError('CONNECTION_LOST', this.closedWhy));
    }
    const sent = performance.now();
    this.socket.write(line + '\n');
    return this.next(timeout, line.split(' ')[0]).then((reply) => {
      if (this.answeredSent === null || sent > this.answeredSent) this.answeredSent = sent;
      return reply;
    });
  }

  /** The next reply line (of a multi-line answer, say). */
  next(timeout, what = 'the request') {
    if (this.unclaimed.length) return Promise.resolve(this.unclaimed.shift());
    if (this.closedWhy !== null) {
      return Promise.reject(new LockbrokerError('CONNECTION_LOST', this.closedWhy));
    }
    const ms = timeout === undefined ? this.timeout : timeout;
    return new Promise((resolve, reject) => {
      const w = { resolve, reject, timer: null };
      if (ms !== null) {
        w.timer = setTimeout(() => {
          const i = this.waiting.indexOf(w);
          if (i >= 0) {
            this.waiting.splice(i, 1);
            this.discard++;          // its reply, when it comes, answers nobody
          }
          reject(new LockbrokerError('CONNECTION_LOST', `no reply to ${what} within ${ms} ms`));
        }, ms);
      }
      this.waiting.push(w);
    });
  }

  close() {
    this.end('closed by the client');
    this.socket.destroy();
  }

  /**
   * Closes, after a QUIT when the connection has a session: a close alone
   * would leave what it holds detached for the grace; QUIT releases it now
   * (and ends the session). Waits for BYE briefly (QUIT_WAIT ms): a daemon
   * that does not answer keeps it for the grace.
   */
  async quit() {
    if (this.session && !this.closed) {
      await this.request('QUIT', Math.min(this.timeout, QUIT_WAIT)).catch(() => {});
    }
    this.close();
  }
}

/**
 * A lock held through a connection of its own. Events: 'lost' (reason).
 * .token (BigInt), .lost, .lostReason, .lostSignal (an AbortSignal aborted
 * on loss), await release(), await using (Symbol.asyncDispose).
 * A set (lock(['a', 'b'])): .names and .tokens are arrays (a token per
 * name, in order), .token is that array and .name 'a,b'; a LOST of any name
 * loses the set.
 * .minHold (ms or null) is lock()'s; .kept is what the release asked the
 * daemon to keep (ms, 0 for at once; null before it and for a lost hold).
 * grantedAt: when the OK came, on the monotonic clock: later than the
 * grant, so a keep counted from it never ends before minHold after the grant.
 * With a session (the client's grace and a daemon that has them), a
 * dropped connection is taken back (RESUME) on a new one before D (the
 * send of the last request answered on it + the grace - a tenth): event
 * 'resumed' (count), .resumes counts them, .session is the id.
 */
class Hold extends EventEmitter {
  constructor(client, conn, name, token, { minHold = null, grantedAt = performance.now() } = {}) {
    super();
    this.minHold = minHold || null;
    this.grantedAt = grantedAt;
    this.kept = null;
    this.names = Array.isArray(name) ? name : [name];
    this.tokens = Array.isArray(token) ? token : [token];
    this.name = this.names.join(',');
    this.token = token;
    this.lost = false;
    this.lostReason = null;
    this.client = client;
    this.conn = conn;
    this.released = false;
    this.safeEnd = null;       // monotonic (performance.now()) ms; null: no window (an older daemon)
    this.noWindow = false;     // the first CHECK promised no time: Client.acquire gives it back
    this.timer = null;
    this.checking = null;      // the CHECK in flight
    this.abort = new AbortController();
    this.sessionKey = client.grace && conn.session ? conn.session : null;
    this.session = this.sessionKey ? this.sessionKey.id : null;
    this.resuming = null;      // the promise of taking the hold back, while it runs
    this.resumes = 0;
    // After a drop, until it is taken back: D, until when the daemon
    // certainly keeps the hold (keptUntil()); dropTimer marks the hold lost
    // then (generation dropGen), with dropReason.
    this.dropEnd = null;
    this.dropGen = 0;
    this.dropReason = null;
    this.dropTimer = null;
    // Whether a CHECK was answered since the grant: until then the last
    // answer is the LOCK's, sent before a wait of any length, too early to
    // bound a CHECK's wait by (it still bounds D after a drop).
    this.confirmed = false;
    this.attach(conn);
  }

  /** Makes conn the hold's: its LOST lines and its end come here (not a replaced one's). */
  attach(conn) {
    this.conn = conn;
    conn.onLost = (n, t, reason) => {
      if (conn !== this.conn) return;
      if (n === null) {
        if (this.sessionKey) this.dropped(reason);
        else this.markLost(reason);
        return;
      }
      const i = this.names.indexOf(n);
      if (i >= 0 && t === String(this.tokens[i])) this.markLost(reason);
    };
  }

  /**
   * D: until when the daemon certainly keeps the hold if conn (the hold's)
   * has dropped, or null if nothing was answered on it. The daemon keeps it
   * for the grace from when it saw the connection end, which may be well
   * before we notice (a NAT's reset that reached only the daemon shows at
   * our next request), but not before it answered the last request
   * answered on it: so the grace, less the tenth the protocol takes off
   * for clock rates, counts from that request's send (PROTOCOL.md,
   * Sessions, What a client may assume after a drop).
   */
  keptUntil(conn = this.conn) {
    const grace = this.client.grace;
    if (conn.answeredSent === null || !grace) return null;
    return conn.answeredSent + grace - Math.ceil(grace / 10);
  }

  /** At a drop: D, its timer started; null when D has passed already (lost). */
  beginDrop(reason) {
    const until = this.keptUntil();
    const now = performance.now();
    if (until === null || now >= until) return null;
    const gen = ++this.dropGen;
    this.dropEnd = until;
    this.dropReason = reason;
    clearTimeout(this.dropTimer);
    // D has come: lost, unless taken back meanwhile; the tries stop too (takeBack).
    this.dropTimer = setTimeout(() => {
      if (this.dropGen === gen && this.dropEnd !== null) this.markLost(this.expiredReason());
    }, until - now);
    this.dropTimer.unref();
    return until;
  }

  lateReason(reason) {
    const ago = performance.now() - (this.conn.answeredSent || 0);
    return `the connection dropped (${reason}) and was not taken back within the grace of ` +
      `${this.client.grace} ms: noticed too late, ${Math.round(ago)} ms after the send of the ` +
      'last request answered on it, from which the grace counts';
  }

  expiredReason() {
    return `the connection dropped (${this.dropReason}) and was not taken back within the ` +
      `grace of ${this.client.grace} ms counted from the last request answered on it (the ` +
      'daemon may free the hold from then)';
  }

  /** The connection ended without our asking: take the hold back on a new one (once at a time), until D. */
  dropped(reason) {
    if (this.lost || this.released || this.resuming) return;
    if (this.beginDrop(reason) === null) {
      this.markLost(this.lateReason(reason));
      return;
    }
    this.resuming = this.takeBack(reason)
      .finally(() => { this.resuming = null; });
  }

  /**
   * Reconnects (RESUME_PAUSE_MIN doubling to RESUME_PAUSE_MAX between tries)
   * until RESUME answers, no try going on past D (dropEnd, set by
   * beginDrop()) nor the hold's window; then CHECKs every name. Resolves
   * true when the hold is back on a new connection, false when it is lost
   * (marked so, unless released meanwhile). A RESUME answered after the
   * hold was marked lost releases what it took back at once (QUIT).
   */
  async takeBack(reason) {
    const { id, secret } = this.sessionKey;
    let pause = RESUME_PAUSE_MIN;
    for (;;) {
      const now = performance.now();
      const until = this.dropEnd;
      if (this.lost) return false;
      if (this.client.check && this.safeEnd !== null && now >= this.safeEnd) {
        this.markLost(`jeopardy: the connection dropped (${reason}) and the hold's window ` +
          'ran out before it was taken back');
        return false;
      }
      if (until === null || now >= until) {
        this.markLost(this.expiredReason());
        return false;
      }
      let conn = null;
      let reply;
      try {
        conn = await this.client.newConn({
          timeout: Math.min(this.client.timeout, Math.max(50, until - now)),
          closedToo: true,
        });
        const left = until - performance.now();
        if (left <= 0 || this.lost) {
          conn.close();         // no RESUME past D: the loop ends it
          continue;
        }
        reply = await conn.request(`RESUME ${id} ${secret}`, Math.max(50, left));
      } catch (e) {
        if (conn) conn.close();
        if (e.code !== 'CONNECTION_LOST' && e.code !== 'LIMIT') {   // AUTH refused: for good
          this.markLost(`the connection dropped (${reason}) and the new one failed: ${e.message}`);
          return false;
        }
        reason = `${reason.split('; ')[0]}; ${e.message}`;
        this.dropReason = reason;
        await pauseFor(Math.max(0, Math.min(pause, until - performance.now())));
        pause = Math.min(pause * 2, RESUME_PAUSE_MAX);
        continue;
      }
      const w = reply.split(' ');
      if (!(w.length === 3 && w[0] === 'OK' && w[1] === id && /^\d+$/.test(w[2]))) {
        conn.close();
        this.markLost(`the connection dropped (${reason}) and the hold was not taken back: ` +
          reply);
        return false;
      }
      conn.session = this.sessionKey;
      if (this.lost) {          // lost at D meanwhile: let it go now, not after the grace
        await conn.quit();
        return false;
      }
      const old = this.conn;
      this.attach(conn);
      this.dropEnd = null;      // back: D no longer applies
      this.dropGen++;
      clearTimeout(this.dropTimer);
      old.close();
      this.resumes++;
      let safe;
      if (this.client.check) {
        safe = await this.check();
      } else {                  // no window kept: only whether it is still held
        for (let i = 0; i < this.names.length; i++) {
          safe = await this.checkOne(this.names[i], this.tokens[i]);
          if (safe === null || safe === DROPPED) break;
        }
      }
      if (safe === DROPPED) {   // dropped again: D counts from the RESUME
        reason = `dropped again after RESUME: ${this.conn.closedWhy}`;
        if (this.beginDrop(reason) === null) {
          this.markLost(this.lateReason(reason));
          return false;
        }
        pause = RESUME_PAUSE_MIN;
        continue;
      }
      if (!this.lost && this.listenerCount('resumed') > 0) this.emit('resumed', this.resumes);
      return !this.lost;
    }
  }

  /** An AbortSignal aborted when the hold is lost: pass it to fetch, child_process, ... */
  get lostSignal() { return this.abort.signal; }

  /**
   * Milliseconds the hold is certainly safe from now (0 when lost or
   * unknown): the last window, and after a drop no later than D (keptUntil()).
   */
  safeRemaining() {
    if (this.lost || this.safeEnd === null) return 0;
    const end = this.dropEnd === null ? this.safeEnd : Math.min(this.safeEnd, this.dropEnd);
    return Math.max(0, end - performance.now());
  }

  /**
   * When the window ends as a wall-clock time (Date.now() ms), for display
   * only: it is worked out from the monotonic window at each read, so a step
   * of the wall clock moves this value, never the window. Decide with
   * safeRemaining() or lost. null: no window.
   */
  get safeUntil() {
    if (this.safeEnd === null) return null;
    return Math.floor(Date.now() + (this.safeEnd - performance.now()));   // wall clock: display
  }

  markLost(reason) {
    if (this.lost || this.released) return;
    this.setLost(reason);
  }

  setLost(reason) {
    this.lost = true;
    this.lostReason = reason;
    clearTimeout(this.timer);
    clearTimeout(this.dropTimer);
    this.abort.abort(new LockbrokerError('LOST', `lock ${this.name} lost: ${reason}`));
    if (this.listenerCount('lost') > 0) this.emit('lost', reason);
  }

  /**
   * A CHECK per name; a set is as safe as its least safe name. Each CHECK
   * may wait only for what is left of the window when it is sent, so that
   * a round never runs past the window without the hold being lost.
   */
  async check() {
    const sent = performance.now();
    let safe = null;
    for (let i = 0; i < this.names.length; i++) {
      const timeout = this.safeEnd === null ? undefined : Math.max(0, this.safeEnd - performance.now());
      const one = await this.checkOne(this.names[i], this.tokens[i], timeout);
      if (one === null || one === DROPPED || one <= 0) return one;
      safe = safe === null ? one : Math.min(safe, one);
    }
    if (this.safeEnd === null || sent + safe > this.safeEnd) this.safeEnd = sent + safe;
    return safe;
  }

  async checkOne(name, token, timeout) {
    const conn = this.conn;
    if (timeout === undefined) timeout = conn.timeout;
    // With a session, an answer that has not come by D may never come: a
    // reset that reached only the daemon (its grace then runs) while what
    // we send goes nowhere. Wait no longer than D.
    const until = this.sessionKey && this.confirmed ? this.keptUntil(conn) : null;
    let byD = false;
    if (until !== null && until - performance.now() <= timeout) {
      timeout = Math.max(0, until - performance.now());
      byD = this.safeEnd === null || until < this.safeEnd;
    }
    let reply;
    try {
      reply = await conn.request(`CHECK ${name} ${token}`, timeout);
      this.confirmed = true;
    } catch (e) {
      if (conn !== this.conn) return DROPPED;     // taken back meanwhile: ask on the new one
      if (this.sessionKey && conn.closed) {
        this.dropped(e.message);                  // taken back on a new connection, if it can be
        return DROPPED;
      }
      if (byD) {
        this.markLost(`no answer from the broker within the grace of ${this.client.grace} ms ` +
          `counted from the last request answered (${e.message}): it may have seen the ` +
          'connection end and free the hold');
        return null;
      }
      this.markLost(this.safeEnd === null ? e.message : `jeopardy: ${e.message}`);
      return null;
    }
    const w = reply.split(' ');
    if (w.length === 4 && w[0] === 'OK' && w[1] === name && w[2] === String(token) &&
        /^\d+$/.test(w[3])) {
      return Number(w[3]);
    }
    if (reply.startsWith('ERR BAD_COMMAND')) return -1;      // an older daemon: no jeopardy
    if (reply.startsWith('ERR NOT_HELD')) {
      this.markLost(`not held (${reply})`);
      return null;
    }
    return 0;
  }

  async start() {
    let safe = await this.check();
    if (safe === DROPPED) {
      // Taken back (or not) by takeBack(), whose CHECK gives the window.
      if (this.resuming) await this.resuming;
      if (this.lost) return;
      safe = this.safeEnd === null ? 0 : 1;
    }
    if (safe === -1) {
      this.safeEnd = null;
      return;
    }
    if (safe === 0) {
      this.noWindow = true;    // no time to work in: Client.acquire releases it and asks again
      return;
    }
    if (!this.lost) this.schedule();
  }

  /**
   * The next CHECK: after a quarter of what is left of the window (at most
   * CHECK_EVERY_MAX, at least CHECK_EVERY_MIN apart), but never later than
   * half of it, so that even a window shorter than CHECK_EVERY_MIN is asked
   * about again before it runs out. The daemon decides how long windows
   * are; nothing here assumes a length.
   */
  schedule() {
    const window = Math.max(0, this.safeEnd - performance.now());
    let every = Math.min(CHECK_EVERY_MAX, Math.max(CHECK_EVERY_MIN, window / 4), window / 2);
    // With a session, a drop only the next CHECK finds must leave most of
    // the grace (D) for taking the hold back: also under CHECK_EVERY_MIN.
    if (this.sessionKey) every = Math.min(every, this.client.grace / 4);
    this.timer = setTimeout(() => this.tick(), every);
    this.timer.unref();
  }

  async tick() {
    if (this.lost || this.released) return;
    if (performance.now() >= this.safeEnd) {
      // The connection stays open until release(): a daemon that was only
      // slow keeps the lock until the program has stopped.
      this.markLost('jeopardy: the broker did not confirm the hold in time');
      return;
    }
    if (this.resuming) {        // being taken back: it CHECKs; the window still counts here
      this.schedule();
      return;
    }
    this.checking = this.check();
    const safe = await this.checking;
    this.checking = null;
    if (safe !== null && !this.lost && !this.released) this.schedule();
  }

  /** Milliseconds of minHold still to run (0 when it has run, or none was asked). */
  minHoldLeft() {
    if (!this.minHold) return 0;
    return Math.max(0, this.minHold - (performance.now() - this.grantedAt));
  }

  /**
   * UNLOCK; the connection then serves the next hold. Resolves true when
   * this call released the hold, false when there was nothing left to
   * release: the hold was lost (lost and lostReason say why; UNLOCK
   * answered NOT_HELD or the connection failed meanwhile count as lost
   * too) or released already. A loss never rejects, so that a `finally`
   * keeps the error of its `try`: check `lost` (or this value) to know
   * whether the lock was held to the end. Rejects (code PROTOCOL) only on a
   * reply the protocol does not give; the connection is closed then.
   *
   * opts.keep: ms (0 to 86400000) the daemon keeps the hold after this
   * release before anybody else is granted it, as `UNLOCK ... keep=<ms>`
   * (PROTOCOL.md, Releasing later); { keep: 0 } releases at once (the work
   * failed: let another try now). Without it, a hold taken with minHold is
   * kept for what is left of minHold (rounded up to the ms), any other is
   * released at once. A RangeError for a keep out of range.
   */
  async release({ keep } = {}) {
    if (keep != null) checkKeep(keep, 'keep');
    while (this.resuming && !this.released) await this.resuming;   // release it there
    if (this.released) return false;
    this.released = true;
    clearTimeout(this.timer);
    if (this.checking) await this.checking.catch(() => {});
    let conn = this.conn;
    // Not released (lost, or an unexpected reply below): whatever the daemon
    // still has of it ends with the connection, as without a session, not
    // after the grace.
    if (this.lost) {
      await conn.quit();
      return false;
    }
    const ms = keep != null ? Math.round(keep) : Math.min(KEEP_MAX, Math.ceil(this.minHoldLeft()));
    let reply;
    const line = ms > 0 ? `UNLOCK ${this.name} keep=${ms}` : `UNLOCK ${this.name}`;
    try {
      reply = await conn.request(line);
    } catch (e) {
      // Dropped meanwhile: take it back and release it there, rather than
      // leave it detached for the grace.
      if (!(this.sessionKey && conn.closed && this.beginDrop(e.message) !== null &&
            await this.takeBack(e.message))) {
        this.conn.close();
        if (!this.lost) this.setLost(e.message);
        return false;
      }
      conn = this.conn;
      try {
        reply = await conn.request(line);
      } catch (e2) {
        conn.close();
        if (!this.lost) this.setLost(e2.message);
        return false;
      }
    }
    if (reply !== `OK ${this.name}`) {
      await conn.quit();
      const err = errorOf(reply, `UNLOCK ${this.name}`);
      if (err.code !== 'NOT_HELD') throw err;
      if (!this.lost) this.setLost(reply);
      return false;
    }
    this.kept = ms;
    this.client.giveBack(conn);
    return true;
  }

  async [asyncDispose]() {
    await this.release();
  }
}

/**
 * A lease: renewed every third of its ttl until release(). Events: 'lost' (reason).
 * sent: when the LOCK was sent, on the monotonic clock (performance.now()).
 */
class Lease extends EventEmitter {
  constructor(client, conn, name, token, ttl, sent, renew) {
    super();
    this.name = name;
    this.token = token;
    this.ttl = ttl;
    this.lost = false;
    this.lostReason = null;
    this.renewals = 0;
    this.client = client;
    this.conn = conn;
    this.released = false;
    this.end = sent + ttl;     // monotonic (performance.now()) ms, counted from the send
    this.timer = null;
    if (renew) this.arm();
  }

  /** Milliseconds the lease certainly lasts from now, 0 once lost. */
  remaining() { return this.lost ? 0 : Math.max(0, this.end - performance.now()); }

  /**
   * When the lease ends as a wall-clock time (Date.now() ms), for display
   * only, worked out from the monotonic deadline at each read: a step of
   * the wall clock moves this value, never the lease. Decide with
   * remaining() or lost.
   */
  get deadline() {
    return Math.floor(Date.now() + (this.end - performance.now()));   // wall clock: display
  }

  markLost(reason) {
    if (this.lost || this.released) return;
    this.lost = true;
    this.lostReason = reason;
    clearTimeout(this.timer);
    if (this.listenerCount('lost') > 0) this.emit('lost', reason);
  }

  arm() {
    this.timer = setTimeout(() => this.tick(), this.ttl / 3);
    this.timer.unref();
  }

  async tick() {
    if (this.lost || this.released) return;
    if (performance.now() >= this.end) {
      this.markLost('expired: no renewal answered within its ttl');
      return;
    }
    try {
      await this.renew();
    } catch (e) {
      if (e.code === 'NOT_HELD') return;
      if (e.code === 'CONNECTION_LOST') {
        this.conn.close();
        try { this.conn = await this.client.newConn(); } catch (_) { /* next time */ }
      }
    }
    if (!this.lost && !this.released) this.arm();
  }

  /** RENEW now, for ttl ms (default the lease's); rejects with NOT_HELD. */
  async renew(ttl = this.ttl) {
    const sent = performance.now();
    const reply = await this.conn.request(`RENEW ${this.name} ${this.token} ${Math.round(ttl)}`);
    if (reply === `OK ${this.name}`) {
      this.end = sent + ttl;
      this.ttl = ttl;
      this.renewals++;
      this.emit('renewed', this.renewals);
      return;
    }
    const err = errorOf(reply, `RENEW ${this.name}`);
    if (err.code === 'NOT_HELD') this.markLost(reply);
    throw err;
  }

  /**
   * UNLOCK <name> <token>. Resolves true when this call released the
   * lease, false when it had ended (lost and lostReason say why; UNLOCK
   * answered NOT_HELD counts too) or was released already. Rejects when the
   * daemon could not be asked (code CONNECTION_LOST: the lease may then
   * stay held until its ttl runs out) or on a reply the protocol does not
   * give (PROTOCOL). A lease is not kept after its release: opts.keep
   * other than 0 is a TypeError.
   */
  async release(opts = {}) {
    if (opts.keep) throw new TypeError(NO_KEEP_FOR_LEASES);
    if (this.released) return false;
    this.released = true;
    clearTimeout(this.timer);
    try {
      if (this.lost) return false;
      const reply = await this.conn.request(`UNLOCK ${this.name} ${this.token}`);
      if (reply === `OK ${this.name}`) return true;
      const err = errorOf(reply, `UNLOCK ${this.name}`);
      if (err.code !== 'NOT_HELD') throw err;
      this.lost = true;
      this.lostReason = reply;
      if (this.listenerCount('lost') > 0) this.emit('lost', reply);
      return false;
    } finally {
      this.conn.close();
    }
  }

  async [asyncDispose]() {
    await this.release();
  }
}

const NO_KEEP_FOR_LEASES = 'a lease takes no minHold or keep: the daemon keeps only a ' +
  "connection's own hold after its release; a lease lasts as its ttl and renewals say";

/** A broker's address and credentials; opens connections as needed. Make one with connect(). */
class Client {
  constructor(opts) {
    this.address = opts.address || DEFAULT_ADDRESS;
    this.timeout = opts.timeout || 10000;
    this.user = opts.user;
    this.password = opts.password;
    this.label = opts.label;
    this.check = opts.check !== false;
    this.tls = opts.tls || null;
    const grace = opts.grace === undefined ? DEFAULT_GRACE : opts.grace;
    if (grace !== null && grace !== 0 &&
        !(typeof grace === 'number' && grace >= 100 && grace <= 3600000)) {
      throw new RangeError('grace must be 0 or null (off), or 100 to 3600000 ms');
    }
    this.grace = grace ? Math.round(grace) : null;
    this.idle = [];
    this.query = null;
    this.queryChain = Promise.resolve();
    this.closed = false;
  }

  /**
   * A logged-in connection. opts.grace: with GRACE (a hold's); opts.timeout:
   * for its connect (default the client's); opts.closedToo: also after
   * close(), which leaves holds as they are (a hold taken back).
   */
  async newConn({ grace = false, timeout = this.timeout, closedToo = false } = {}) {
    if (this.closed && !closedToo) {
      throw new LockbrokerError('CONNECTION_LOST', 'the client is closed');
    }
    const conn = await Conn.open(this.address, timeout, this.tls);
    conn.timeout = this.timeout;
    try {
      if (this.user != null) {
        const r = await conn.request(`AUTH ${this.user} ${this.password || ''}`);
        if (r !== `OK ${this.user}`) throw errorOf(r, 'AUTH');
      }
      if (this.label != null) {
        const r = await conn.request(`CLIENT ${this.label}`);
        if (r !== 'OK') throw errorOf(r, 'CLIENT');
      }
      if (grace && this.grace) {
        const r = await conn.request(`GRACE ${this.grace}`);
        const m = SESSION_RE.exec(r);
        if (m) conn.session = { id: m[1], secret: m[2] };
        // (ERR BAD_COMMAND: no sessions there; ERR NOAUTH: no login, the lock request says so.)
        else if (!/^ERR (BAD_COMMAND|NOAUTH)/.test(r)) throw errorOf(r, `GRACE ${this.grace}`);
      }
    } catch (e) {
      conn.close();
      throw e;
    }
    return conn;
  }

  holdConn() {
    while (this.idle.length) {
      const c = this.idle.pop();
      if (!c.closed) return Promise.resolve(c);
    }
    return this.newConn({ grace: true });
  }

  giveBack(conn) {
    conn.onLost = null;
    if (!this.closed && !conn.closed && this.idle.length < IDLE_MAX) this.idle.push(conn);
    else conn.close();
  }

  /**
   * A hold with a window: a grant whose first CHECK promises no time is
   * released (UNLOCK, no keep) and asked for again, after a pause growing
   * from RETRY_MIN to RETRY_MAX, with what is left of opts.wait, until one
   * comes with a window or the wait ends (TIMEOUT; BUSY for TRYLOCK, which
   * does not wait).
   */
  async acquire(cmd, name, opts = {}) {
    const multi = Array.isArray(name);     // a set (PROTOCOL.md, Sets of locks)
    const names = multi ? name : [name];
    names.forEach(checkName);
    if (multi && (names.length < 1 || names.length > 16 || new Set(names).size !== names.length)) {
      throw new LockbrokerError('BAD_NAME', 'a set is 1 to 16 distinct names');
    }
    name = names.join(',');
    const minHold = opts.minHold == null ? null : checkKeep(opts.minHold, 'minHold');
    const end = opts.wait == null ? null : performance.now() + opts.wait;
    let wait = opts.wait == null ? null : Math.round(opts.wait);
    let pause = RETRY_MIN;
    for (let grants = 1; ; grants++) {
      const hold = await this.grant(cmd, name, names, multi, wait, minHold, opts);
      if (!hold.noWindow) return hold;
      await hold.release({ keep: 0 }).catch(() => {});   // a protocol error: closed, not held
      const why = `granted ${grants} time${grants === 1 ? '' : 's'}, but the broker promised ` +
        'no time for it (CHECK answered 0)';
      if (cmd === 'TRYLOCK') throw new LockbrokerError('BUSY', `lock ${name}: ${why}`);
      if (end !== null) {
        const left = end - performance.now();
        if (left <= 0) {
          throw new LockbrokerError('TIMEOUT',
            `lock ${name} not granted with time to use it within ${opts.wait} ms: ${why}`);
        }
        pause = Math.min(pause, left);
      }
      await pauseFor(pause, opts.signal);
      if (end !== null) wait = Math.max(0, Math.floor(end - performance.now()));
      pause = Math.min(pause * 2, RETRY_MAX);
    }
  }

  /** One LOCK (waiting wait ms; null: for ever) or TRYLOCK: the Hold, its first CHECK asked. */
  async grant(cmd, name, names, multi, wait, minHold, opts) {
    const words = [cmd, name];
    if (cmd === 'LOCK' && wait != null) words.push(String(wait));
    words.push(...options(opts));
    const signal = opts.signal;
    if (signal && signal.aborted) throw signal.reason;
    const conn = await this.holdConn();
    const onAbort = () => conn.close();     // the daemon drops a request whose connection closes
    if (signal) signal.addEventListener('abort', onAbort, { once: true });
    let reply;
    try {
      reply = await conn.request(words.join(' '),
        cmd === 'LOCK' && wait == null ? null : this.timeout + (wait || 0));
    } catch (e) {
      conn.close();
      if (signal && signal.aborted) throw signal.reason;
      throw e;
    } finally {
      if (signal) signal.removeEventListener('abort', onAbort);
    }
    const grantedAt = performance.now();
    const p = reply.split(' ');
    const t = p.length === 3 ? p[2].split(',') : [];
    if (p.length === 3 && p[0] === 'OK' && p[1] === name && t.length === names.length &&
        t.every((x) => /^\d+$/.test(x))) {
      const tokens = t.map((x) => BigInt(x));
      const hold = new Hold(this, conn, multi ? names : name, multi ? tokens : tokens[0],
        { minHold, grantedAt });
      if (this.check) await hold.start();
      return hold;
    }
    conn.close();
    if (reply === `TIMEOUT ${name}`) {
      throw new LockbrokerError('TIMEOUT', `lock ${name} not granted within ${opts.wait} ms`, reply);
    }
    if (reply === `BUSY ${name}`) throw await this.busyError(name, multi, reply);
    throw errorOf(reply, `${cmd} ${name}`);
  }

  /**
   * The BUSY error of a TRYLOCK, with who holds the lock as one STATUS says
   * (one round trip more; in distributed mode one ZooKeeper read): .status
   * (null when it could not be had), .holder and .label (null if unknown).
   * Not for a set, whose taken name is not known; without a holder if the
   * STATUS fails or finds the lock free again.
   */
  async busyError(name, multi, reply) {
    let st = null;
    if (!multi) {
      try {
        st = await this.status(name);
      } catch (e) { /* best effort: BUSY all the same */ }
    }
    let who = '';
    if (st && st.held && st.holder) {
      who = ` by ${st.holder}${st.label ? ` label=${st.label}` : ''}`;
      if (st.delay !== null) {
        who += `, kept ${st.delay} ms more after its release (minHold or a lock-delay)`;
      }
    }
    const e = new LockbrokerError('BUSY', `lock ${name} is held${who}`, reply);
    e.status = st;
    e.holder = who ? st.holder : null;
    e.label = who ? st.label : null;
    return e;
  }

  /**
   * Takes the lock: opts.wait (ms; default for ever), shared, limit, delay,
   * signal (an AbortSignal that cancels the wait), minHold (ms, up to
   * 86400000: the lock stays held that long after its grant even when
   * released sooner; see Hold.release). name may be an array of
   * up to 16 names, a set: all held or none, no deadlock between sets
   * (Hold.names, Hold.tokens). Resolves to a Hold;
   * rejects with code TIMEOUT, CONFLICT, UNAVAILABLE, DENIED, BAD_NAME, ...
   * A grant whose first CHECK promises no time (0: a daemon just back from
   * a ZooKeeper outage, say) is released at once and the lock asked for
   * again, after a pause of 100 ms doubling up to 1 s, while opts.wait
   * lasts: TIMEOUT if none with a window came in time.
   */
  lock(name, opts = {}) { return this.acquire('LOCK', name, opts); }

  /**
   * Takes the lock if it is free now; rejects with code BUSY otherwise
   * (also when granted with no time promised, CHECK 0: released at once).
   * With { minHold: period }: at most once per period across its callers.
   */
  trylock(name, opts = {}) { return this.acquire('TRYLOCK', name, opts); }

  /**
   * A lease for ttl ms (100 to 86400000), renewed in the background unless
   * opts.renew is false; opts.wait, shared, limit as lock(). opts.minHold
   * is a TypeError: a lease is not kept after its release.
   */
  async lease(name, ttl, opts = {}) {
    if (opts.minHold != null) throw new TypeError(NO_KEEP_FOR_LEASES);
    checkName(name);
    if (!(ttl >= 100 && ttl <= 86400000)) throw new RangeError('ttl must be 100 to 86400000 ms');
    const words = ['LOCK', name];
    if (opts.wait != null) words.push(String(Math.round(opts.wait)));
    words.push(...options({ shared: opts.shared, limit: opts.limit, ttl }));
    const conn = await this.newConn();
    const sent = performance.now();
    let reply;
    try {
      reply = await conn.request(words.join(' '), opts.wait == null ? null : this.timeout + opts.wait);
    } catch (e) {
      conn.close();
      throw e;
    }
    const p = reply.split(' ');
    if (!(p.length === 3 && p[0] === 'OK' && p[1] === name && /^\d+$/.test(p[2]))) {
      conn.close();
      if (reply === `TIMEOUT ${name}`) {
        throw new LockbrokerError('TIMEOUT', `lease ${name} not granted within ${opts.wait} ms`, reply);
      }
      throw errorOf(reply, `LOCK ${name}`);
    }
    const lease = new Lease(this, conn, name, BigInt(p[2]), ttl, sent, opts.renew !== false);
    // Granted after a wait: its ttl began at the grant; renew, so that it counts from now.
    if (performance.now() - sent > ttl / 10) await lease.renew();
    return lease;
  }

  ask(line, multi) {
    const run = async () => {
      for (let attempt = 1; ; attempt++) {
        if (!this.query || this.query.closed) this.query = await this.newConn();
        try {
          const first = await this.query.request(line);
          if (!multi || first.startsWith('ERR ')) return [first];
          const lines = [first];
          while (lines[lines.length - 1] !== 'END') {
            try {
              lines.push(await this.query.next());
            } catch (e) {
              this.query.close();     // the rest would answer later requests
              throw e;
            }
          }
          return lines;
        } catch (e) {
          if (e.code !== 'CONNECTION_LOST' || attempt === 2) throw e;
          this.query = null;
        }
      }
    };
    const p = this.queryChain.then(run, run);
    this.queryChain = p.catch(() => {});
    return p;
  }

  /** PING; rejects unless the broker answers PONG. */
  async ping() {
    const [r] = await this.ask('PING');
    if (r !== 'PONG') throw errorOf(r, 'PING');
  }

  /** STATUS: { state ('held'|'free'), held (boolean, as `lockbroker status --json`), holder, token (BigInt|null), since (ms), waiters, queue, mode, holders, delay, lease, label }. */
  async status(name) {
    checkName(name);
    const [r] = await this.ask(`STATUS ${name}`);
    const w = r.split(' ');
    if (w.length < 3 || w[0] !== 'STATUS' || w[1] !== name) throw errorOf(r, `STATUS ${name}`);
    return statusOf(w[2], fields(w.slice(3)));
  }

  /** LOCKS [glob]: this daemon's holds and waits, one object each. */
  async locks(glob) {
    const lines = await this.ask(glob ? `LOCKS ${glob}` : 'LOCKS', true);
    if (lines[0].startsWith('ERR ')) throw errorOf(lines[0], 'LOCKS');
    return lines.slice(0, -1).filter((l) => l.startsWith('LOCK ')).map((l) => {
      const w = l.split(' ');
      return { name: w[1], ...statusOf('held', fields(w.slice(3))), mode: w[2] };
    });
  }

  /**
   * HOLDERS [glob]: every holder (all of a shared or limit lock's) and queued
   * request, through every daemon in distributed mode, one object each, with
   * `state` 'held' or 'queued' (token null where the daemon does not know it).
   */
  async holders(glob) {
    const lines = await this.ask(glob ? `HOLDERS ${glob}` : 'HOLDERS', true);
    if (lines[0].startsWith('ERR ')) throw errorOf(lines[0], 'HOLDERS');
    return lines.slice(0, -1).filter((l) => l.startsWith('HOLDER ')).map((l) => {
      const w = l.split(' ');
      return { name: w[1], ...statusOf(w[3], fields(w.slice(4))), mode: w[2] };
    });
  }

  /** STATS: { name: number|string }. */
  async stats() {
    const lines = await this.ask('STATS', true);
    if (lines[0].startsWith('ERR ')) throw errorOf(lines[0], 'STATS');
    const out = {};
    for (const l of lines.slice(0, -1)) {
      const w = l.split(' ');
      if (w[0] === 'STAT' && w.length >= 3) {
        const v = w.slice(2).join(' ');
        out[w[1]] = /^\d+$/.test(v) ? Number(v) : v;
      }
    }
    return out;
  }

  /** Closes the query and idle connections; holds and leases stay (release them first). */
  async close() {
    this.closed = true;
    if (this.query) this.query.close();
    for (const c of this.idle.splice(0)) c.close();
  }
}

function statusOf(state, f) {
  const num = (k) => (f[k] !== undefined && /^\d+$/.test(f[k]) ? Number(f[k]) : null);
  return {
    state,
    held: state === 'held',
    holder: f.holder && f.holder !== '-' ? f.holder : null,
    token: f.token && /^\d+$/.test(f.token) ? BigInt(f.token) : null,
    since: num('since'),
    waiters: num('waiters'),
    queue: num('queue'),
    mode: f.mode || 'exclusive',
    limit: num('limit'),
    holders: num('holders'),
    delay: num('delay'),
    lease: num('lease'),
    label: f.label && f.label !== '-' ? f.label : null,
  };
}

/**
 * Connects (once, so that a wrong address or password fails here) and
 * resolves to a Client. opts: address, timeout (ms, default 10000), user,
 * password, label, check (false: no jeopardy CHECKs), tls, grace (ms,
 * 100 to 3600000, default 5000; 0 or null: off: how long each hold
 * outlives a dropped connection, taken back on a new one meanwhile; the
 * daemon caps it at its max_grace_ms).
 *
 * tls: the daemon's TLS listener ([tls] listen), with tls.connect()'s
 * options: ca (the CA that signed the daemon's certificate), cert and key
 * (a client certificate: a certificate login), servername (the name to
 * check the certificate for; default the address's host). Over TLS,
 * connect() also sends PING: TLS 1.3 says a refused client certificate only
 * after the handshake, and it should fail here too.
 */
async function connect(opts = {}) {
  const client = new Client(opts);
  client.query = await client.newConn();
  if (client.tls) {
    let reply;
    try {
      reply = await client.query.request('PING');
    } catch (e) {
      client.query.close();
      throw new LockbrokerError(e.code, `cannot connect to ${client.address}: ${e.message}`);
    }
    if (reply !== 'PONG') {
      client.query.close();
      throw errorOf(reply, 'PING');
    }
  }
  return client;
}

module.exports = { connect, Client, Hold, Lease, LockbrokerError, checkName, parseAddress };
