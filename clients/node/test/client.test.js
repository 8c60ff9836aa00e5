'use strict';
// Run by tests/e2e/test_client_node.py, which starts the daemons and passes
// their addresses: LB_ADDR (embedded), LB_JEOPARDY_ADDR and LB_JEOPARDY_PID
// (embedded, tcp_user_timeout_ms = 1500), LB_AUTH_ADDR (users file: alice,
// pattern app-*), LB_DIST_ADDR and LB_ZK_PID (distributed, its ZooKeeper).
// Tests of windows the daemon does not give run against a fake broker of
// their own (fakeBroker), always.
// Waits are for events (replies, 'lost', 'renewed'); nothing sleeps to
// synchronise. The one duration asserted is a lower bound: a lock kept for
// a minimum hold is not granted to a waiter sooner.
const test = require('node:test');
const assert = require('node:assert');
const { once } = require('node:events');
const net = require('node:net');
const { performance } = require('node:perf_hooks');
const lb = require('..');

const env = process.env;
const T = 10000;

async function rejectsWith(promise, code) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof lb.LockbrokerError, String(e));
    assert.strictEqual(e.code, code, e.message);
    return true;
  });
}

test('lock, release, tokens go up, busy and timeout', { skip: !env.LB_ADDR }, async () => {
  const c = await lb.connect({ address: env.LB_ADDR, timeout: T });
  const h1 = await c.lock('n-a');
  assert.strictEqual(typeof h1.token, 'bigint');
  assert.strictEqual(h1.lost, false);
  assert.ok(h1.safeRemaining() > 0);
  assert.strictEqual((await c.status('n-a')).token, h1.token);
  const held = await c.status('n-a');
  assert.deepStrictEqual([held.state, held.held], ['held', true]);   // the CLI's JSON names both
  // BUSY says who holds it, as a STATUS tells.
  const busy = await c.trylock('n-a').then(() => null, (e) => e);
  assert.strictEqual(busy.code, 'BUSY');
  assert.strictEqual(busy.holder, held.holder);
  assert.strictEqual(busy.label, held.label);
  assert.strictEqual(busy.status.token, h1.token);
  assert.strictEqual(busy.message, `lock n-a is held by ${held.holder}` +
    (held.label ? ` label=${held.label}` : ''));
  await rejectsWith(c.lock('n-a', { wait: 50 }), 'TIMEOUT');
  await h1.release();
  assert.strictEqual((await c.status('n-a')).state, 'free');
  assert.strictEqual((await c.status('n-a')).held, false);
  const h2 = await c.lock('n-a');
  assert.ok(h2.token > h1.token);
  await h2.release();
  await c.ping();
  assert.ok((await c.stats()).grants >= 2);
  await c.close();
});

test('a set of locks: all or none, tokens in order, lost with any name', { skip: !env.LB_ADDR }, async () => {
  const c = await lb.connect({ address: env.LB_ADDR, timeout: T });
  const h = await c.lock(['n-s-c', 'n-s-a', 'n-s-b'], { wait: T });
  assert.deepStrictEqual(h.names, ['n-s-c', 'n-s-a', 'n-s-b']);
  assert.strictEqual(h.name, 'n-s-c,n-s-a,n-s-b');
  assert.strictEqual(h.tokens.length, 3);
  assert.deepStrictEqual(h.token, h.tokens);
  for (let i = 0; i < 3; i++) {
    assert.strictEqual((await c.status(h.names[i])).token, h.tokens[i]);
  }
  assert.ok(h.safeRemaining() > 0);                  // every name CHECKed
  const setBusy = await c.trylock(['n-s-x', 'n-s-b']).then(() => null, (e) => e);
  assert.deepStrictEqual([setBusy.code, setBusy.status, setBusy.holder],
    ['BUSY', null, null]);                           // a set: which name is taken is not known
  assert.strictEqual((await c.status('n-s-x')).state, 'free');   // none taken
  await rejectsWith(c.lock(['n-s-a', 'n-s-y'], { wait: 50 }), 'TIMEOUT');
  await rejectsWith(c.lock(['n-s-a', 'n-s-a']), 'BAD_NAME');
  await h.release();
  for (const n of h.names) assert.strictEqual((await c.status(n)).state, 'free');
  // A LOST of any name, as the connection passes it on, loses the set.
  const h2 = await c.lock(['n-s-b', 'n-s-a']);
  const lost = once(h2, 'lost');
  h2.conn.onLost('n-s-a', String(h2.tokens[1]), 'session-expired');
  assert.deepStrictEqual(await lost, ['session-expired']);
  assert.strictEqual(await h2.release(), false);
  await c.close();
});

test('modes, conflict, bad names, locks', { skip: !env.LB_ADDR }, async () => {
  const c = await lb.connect({ address: env.LB_ADDR, timeout: T });
  const r1 = await c.lock('n-m', { shared: true });
  const r2 = await c.lock('n-m', { shared: true });
  assert.strictEqual((await c.status('n-m')).holders, 2);
  assert.deepStrictEqual((await c.locks('n-m*')).map((l) => l.name), ['n-m']);
  assert.deepStrictEqual((await c.holders('n-m*')).map((h) => [h.name, h.mode, h.state]),
    [['n-m', 'shared', 'held'], ['n-m', 'shared', 'held']]);
  await rejectsWith(c.trylock('n-m', { limit: 2 }), 'CONFLICT');
  await r1.release();
  await r2.release();
  await rejectsWith(c.lock('no spaces'), 'BAD_NAME');
  await assert.rejects(c.lock('n-m', { shared: true, limit: 2 }), TypeError);
  await c.close();
});

test('an AbortSignal cancels a wait; the waiter then gets nothing', { skip: !env.LB_ADDR }, async () => {
  const c = await lb.connect({ address: env.LB_ADDR, timeout: T });
  const h = await c.lock('n-ab');
  const ac = new AbortController();
  const waiting = c.lock('n-ab', { signal: ac.signal });
  // The wait is queued once STATUS counts it.
  while ((await c.status('n-ab')).waiters === 0) { /* asks again: an answer each time */ }
  ac.abort(new Error('no longer wanted'));
  await assert.rejects(waiting, /no longer wanted/);
  while ((await c.status('n-ab')).waiters !== 0) { /* the daemon drops it on the close */ }
  await h.release();
  await c.close();
});

test('without a grace, a dropped connection marks the hold lost', { skip: !env.LB_ADDR }, async () => {
  const c = await lb.connect({ address: env.LB_ADDR, timeout: T, grace: 0 });
  const h = await c.lock('n-d');
  assert.strictEqual(h.session, null);
  const lost = once(h, 'lost');
  h.conn.socket.destroy();      // as a reset by the network would
  const [reason] = await lost;
  assert.match(reason, /closed|error/);
  assert.strictEqual(h.lost, true);
  assert.strictEqual(h.lostSignal.aborted, true);
  assert.strictEqual(await h.release(), false);
  // Nothing survives: the next hold is new, on a new connection.
  const h2 = await c.lock('n-d', { wait: T });
  assert.ok(h2.token > h.token);
  await h2.release();
  await c.close();
});

// A TCP proxy in front of the daemon whose connections the test resets, as a
// NAT, a load balancer or a restarted proxy does: down() resets every
// connection through it and every new one at once until up(); refused
// counts those (a client trying to reconnect), waitRefused(n) waits for n.
// blackhole() resets the daemon's side of every connection and leaves the
// client's open and silent (a NAT that dropped its state, as the client
// sees it until a reset reaches it); up() resets those.
async function resetProxy(upstream) {
  const [, host, port] = /^(.*):(\d+)$/.exec(upstream);
  const live = new Set();
  const pairs = [];
  let held = [];
  const events = new (require('node:events').EventEmitter)();
  let down = false;
  const server = net.createServer((s) => {
    s.on('error', () => {});
    if (down) {
      p.refused++;
      events.emit('refused');
      s.resetAndDestroy();
      return;
    }
    const u = net.connect({ host, port: Number(port) });
    u.on('error', () => s.resetAndDestroy());
    s.on('error', () => u.resetAndDestroy());
    live.add(s).add(u);
    pairs.push([s, u]);
    s.pipe(u);
    u.pipe(s);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const p = {
    address: `127.0.0.1:${server.address().port}`,
    refused: 0,
    down() {
      down = true;
      for (const x of live) x.resetAndDestroy();
      live.clear();
    },
    blackhole() {
      for (const [s, u] of pairs.splice(0)) {
        if (s.destroyed) continue;
        s.unpipe(u);
        u.unpipe(s);
        s.removeAllListeners('error');
        s.on('error', () => {});
        s.pause();              // what the client sends stays in its socket
        u.removeAllListeners('error');
        u.on('error', () => {});
        u.resetAndDestroy();
        live.delete(s);
        live.delete(u);
        held.push(s);
      }
    },
    up() {
      down = false;
      for (const s of held) s.resetAndDestroy();
      held = [];
    },
    async waitRefused(n) {
      while (p.refused < n) await once(events, 'refused');
    },
    close() { p.down(); p.up(); server.close(); },
  };
  return p;
}

// Issue 38: a hold outlives a cut connection for the client's grace (GRACE,
// then RESUME on a new connection); a wait in flight fails; a cut longer
// than the grace loses the hold.
test('grace: a hold survives a connection cut; a wait in flight fails', { skip: !env.LB_ADDR }, async () => {
  const proxy = await resetProxy(env.LB_ADDR);
  const c = await lb.connect({ address: proxy.address, timeout: T, grace: T });
  const other = await lb.connect({ address: env.LB_ADDR, timeout: T, grace: 0 });
  try {
    assert.strictEqual(c.grace, T);
    const h = await c.lock(['n-g-a', 'n-g-b']);
    assert.match(h.session, /^[0-9a-f]{16}$/);
    const tokens = h.tokens;
    const waiting = c.lock('n-g-a', { wait: T });
    const failed = rejectsWith(waiting, 'CONNECTION_LOST');
    while ((await other.status('n-g-a')).waiters === 0) { /* asks again: an answer each time */ }
    const resumed = once(h, 'resumed');
    proxy.down();
    await proxy.waitRefused(2);                  // the client is reconnecting
    await failed;
    await rejectsWith(other.trylock('n-g-b'), 'BUSY');
    assert.strictEqual(h.lost, false, h.lostReason);
    proxy.up();
    assert.deepStrictEqual(await resumed, [1]);
    assert.strictEqual(h.lost, false, h.lostReason);
    assert.deepStrictEqual(h.tokens, tokens);
    assert.strictEqual(h.resumes, 1);
    for (let i = 0; i < 2; i++) {
      assert.strictEqual((await other.status(h.names[i])).token, tokens[i]);
    }
    assert.ok(h.safeRemaining() > 0);            // CHECKed again
    assert.strictEqual(await h.release(), true);
    assert.strictEqual((await other.status('n-g-b')).state, 'free');
  } finally {
    await c.close();
    await other.close();
    proxy.close();
  }
});

test('grace: a cut longer than the grace loses the hold', { skip: !env.LB_ADDR }, async () => {
  const proxy = await resetProxy(env.LB_ADDR);
  const c = await lb.connect({ address: proxy.address, timeout: T, grace: 300 });
  const other = await lb.connect({ address: env.LB_ADDR, timeout: T, grace: 0 });
  try {
    const h = await c.lock('n-g-l');
    const lost = once(h, 'lost');
    proxy.down();
    const [reason] = await lost;
    assert.match(reason, /not taken back within the grace of 300 ms/);
    assert.ok(proxy.refused >= 1);
    // The daemon abandons it once its grace has run: free for the next one.
    while ((await other.status('n-g-l')).state !== 'free') { /* an answer each time */ }
    proxy.up();
    assert.strictEqual(await h.release(), false);
    await assert.rejects(lb.connect({ address: env.LB_ADDR, grace: 50 }), RangeError);
  } finally {
    await c.close();
    await other.close();
    proxy.close();
  }
});

// After a drop the hold is certain only until D, the send of the last
// request answered on the lost connection + the grace - a tenth
// (PROTOCOL.md, What a client may assume after a drop). A fake broker
// with sessions: every CHECK answers a 60 s window (a once-a-second
// schedule without the grace), and RESUME always answers OK, as no daemon
// would after its grace: only the library's own deadline can stop it.
async function sessionBroker(name, lockWait = 0, checkWait = 0) {
  const log = [];
  const sockets = [];
  const fake = await fakeBroker((line, reply) => {
    log.push(line);
    const w = line.split(' ');
    if (w[0] === 'GRACE') return reply(`OK 0123456789abcdef ${'0123456789abcdef'.repeat(2)}`);
    if (w[0] === 'RESUME') return reply('OK 0123456789abcdef 1');
    if (w[0] === 'LOCK' && w[1] === name) return setTimeout(() => reply(`OK ${name} 1`), lockWait);
    if (w[0] === 'CHECK' && w[1] === name) {
      return setTimeout(() => reply(`OK ${name} 1 60000`), checkWait);
    }
    if (w[0] === 'UNLOCK') return reply(`OK ${name}`);
    if (w[0] === 'QUIT') return reply('BYE');
    reply('ERR BAD_COMMAND not in this fake');
  }, sockets);
  fake.log = log;
  fake.sockets = sockets;
  fake.requests = (word) => log.filter((l) => l.split(' ')[0] === word);
  return fake;
}

// promise, or a rejection once T ms have passed (the test then ends, and
// its finally closes what it opened).
function within(promise, what) {
  let timer;
  const late = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`not within ${T} ms: ${what}`)), T);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

test('grace: with a session, CHECKs come every quarter of the grace', async () => {
  const fake = await sessionBroker('n-dq');
  const c = await lb.connect({ address: fake.address, timeout: T, grace: 800 });
  try {
    const h = await c.lock('n-dq');
    assert.strictEqual(h.session, '0123456789abcdef');
    // 1600 ms held: every 200 ms makes about 9 CHECKs; the window's own
    // schedule (once a second) makes 3 at most.
    await new Promise((resolve) => setTimeout(resolve, 1600));
    assert.strictEqual(h.lost, false, h.lostReason);
    assert.ok(fake.requests('CHECK').length >= 5, JSON.stringify(fake.log));
    assert.strictEqual(await h.release(), true);
  } finally {
    await c.close();
    fake.close();
  }
});

test('grace: a grant after a wait longer than the grace is held', async () => {
  // D counts from the LOCK's send until a CHECK is answered; the first
  // CHECK after a long wait (answered in 30 ms) is not cut short by that.
  const fake = await sessionBroker('n-dw', 500, 30);
  const c = await lb.connect({ address: fake.address, timeout: T, grace: 300 });
  try {
    const h = await c.lock('n-dw', { wait: T });
    assert.strictEqual(h.lost, false, h.lostReason);
    assert.ok(h.safeRemaining() > 0);
    assert.strictEqual(await h.release(), true);
  } finally {
    await c.close();
    fake.close();
  }
});

test('grace: a drop noticed after D is lost at once, with no RESUME', async () => {
  // check: false: D counts from the last request answered (the LOCK here).
  const fake = await sessionBroker('n-dn');
  const c = await lb.connect({ address: fake.address, timeout: T, grace: 300, check: false });
  try {
    const sent = performance.now();          // before the LOCK: D is sooner than sent + 300
    const h = await c.lock('n-dn');
    assert.strictEqual(h.session, '0123456789abcdef');
    while (performance.now() <= sent + 300) await new Promise((resolve) => setTimeout(resolve, 10));
    const lost = once(h, 'lost');
    for (const s of fake.sockets) s.resetAndDestroy();   // the drop, noticed now
    const [reason] = await within(lost, 'the hold lost');
    assert.match(reason, /not taken back within the grace of 300 ms: noticed too late/);
    assert.deepStrictEqual(fake.requests('RESUME'), []);
    assert.strictEqual(h.safeRemaining(), 0);
    assert.strictEqual(await h.release(), false);
  } finally {
    await c.close();
    fake.close();
  }
});

test('grace: a reset only the daemon saw loses the hold by D', { skip: !env.LB_ADDR },
  async () => {
  // The daemon's side is reset (its grace starts), the client's goes
  // silent: no drop to notice, no answer to its CHECKs. The hold is lost
  // (by D) before the daemon grants the name to a waiter.
  const proxy = await resetProxy(env.LB_ADDR);
  const c = await lb.connect({ address: proxy.address, timeout: T, grace: 2000 });
  const other = await lb.connect({ address: env.LB_ADDR, timeout: T, grace: 0 });
  let granted = null;
  try {
    const h = await c.lock('n-db');
    const order = [];
    const lost = once(h, 'lost');
    h.on('lost', () => order.push('lost'));
    proxy.blackhole();
    granted = other.lock('n-db', { wait: T }).then((h2) => { order.push('granted'); return h2; });
    const [reason] = await within(lost, 'the hold lost');
    const h2 = await granted;
    assert.deepStrictEqual(order, ['lost', 'granted']);
    assert.match(reason, /no answer from the broker within the grace of 2000 ms/);
    assert.strictEqual(h.safeRemaining(), 0);
    proxy.up();                              // the client sees its reset only now
    assert.strictEqual(await h.release(), false);
    assert.ok(h2.token > h.token);
  } finally {
    const h2 = granted && await granted.catch(() => null);
    if (h2) await h2.release();
    await c.close();
    await other.close();
    proxy.close();
  }
});

test('releasing a lost or ended hold resolves false: a finally keeps the error of its try',
  { skip: !env.LB_ADDR }, async () => {
  const c = await lb.connect({ address: env.LB_ADDR, timeout: T });
  const op = await lb.connect({ address: env.LB_ADDR, timeout: T });
  try {
    // README's deploy: the lock is broken mid-deploy, the deploy stops with
    // its own error, and the release in its finally does not replace it.
    const h = await c.lock('n-br');
    const lost = once(h, 'lost');
    assert.strictEqual(await op.query.request('BREAK n-br'), 'OK n-br');
    let released;
    await assert.rejects(async () => {
      try {
        await lost;
        if (h.lost) throw new Error(`lock lost (${h.lostReason}): stopping`);
      } finally {
        released = await h.release();
      }
    }, (e) => e.message === 'lock lost (broken): stopping');
    assert.strictEqual(released, false);
    assert.strictEqual(h.released, true);
    assert.strictEqual(await h.release(), false);
    assert.strictEqual((await c.status('n-br')).state, 'free');
    // Broken while its LOST line goes unheard: UNLOCK (or a CHECK) finds it
    // gone; the release resolves false and the hold is lost.
    const h2 = await c.lock('n-br');
    h2.conn.onLost = null;
    assert.strictEqual(await op.query.request('BREAK n-br'), 'OK n-br');
    assert.strictEqual(await h2.release(), false);
    assert.strictEqual(h2.lost, true);
    assert.match(h2.lostReason, /NOT_HELD/);
    // A hold released cleanly: true, then false.
    const h3 = await c.lock('n-br');
    assert.strictEqual(await h3.release(), true);
    assert.strictEqual(await h3.release(), false);
    assert.strictEqual(h3.lost, false);
    // A lease that ended unseen (no renewals, expired): false as well.
    const lease = await c.lease('n-br-l', 100, { renew: false });
    while ((await c.status('n-br-l')).state !== 'free') { /* asks again until it expired */ }
    assert.strictEqual(await lease.release(), false);
    assert.strictEqual(lease.lost, true);
    const l2 = await c.lease('n-br-l', 60000);
    assert.strictEqual(await l2.release(), true);
  } finally {
    await op.close();
    await c.close();
  }
});

test('a lease renews itself and is lost when ended elsewhere', { skip: !env.LB_ADDR }, async () => {
  const c = await lb.connect({ address: env.LB_ADDR, timeout: T });
  const lease = await c.lease('n-l', 300);
  while (lease.renewals < 4) await once(lease, 'renewed');
  const st = await c.status('n-l');
  assert.strictEqual(st.token, lease.token);
  assert.strictEqual(lease.lost, false);
  const lost = once(lease, 'lost');
  const other = await lb.connect({ address: env.LB_ADDR, timeout: T });
  assert.strictEqual(await other.query.request(`UNLOCK n-l ${lease.token}`), 'OK n-l');
  const [reason] = await lost;
  assert.match(reason, /NOT_HELD/);
  assert.strictEqual(await lease.release(), false);
  const l2 = await c.lease('n-l2', 60000);
  assert.ok((await c.status('n-l2')).lease <= 60000);
  await l2.release();
  assert.strictEqual((await c.status('n-l2')).state, 'free');
  await other.close();
  await c.close();
});

// A client whose holds and leases end() closes, whatever state they are in,
// so that a failed assertion leaves no socket open to keep node running.
async function connectTracked(address) {
  const c = await lb.connect({ address, timeout: T });
  const taken = [];
  for (const m of ['lock', 'trylock', 'lease']) {
    const take = c[m].bind(c);
    c[m] = async (...args) => {
      const h = await take(...args);
      taken.push(h);
      return h;
    };
  }
  c.end = async () => {
    for (const h of taken) h.conn.close();
    await c.close();
  };
  return c;
}

test('minHold: released early, busy for others with its token and delay= until the keep ends',
  { skip: !env.LB_ADDR }, async () => {
    const c = await connectTracked(env.LB_ADDR);
    const other = await connectTracked(env.LB_ADDR);
    try {
      const h = await c.trylock('n-mh', { minHold: 60000 });
      assert.strictEqual(h.minHold, 60000);
      assert.ok(h.minHoldLeft() > 0);
      assert.strictEqual(h.kept, null);
      assert.strictEqual(await h.release(), true);
      assert.ok(h.kept > 0 && h.kept <= 60000, String(h.kept));
      const busy = await other.trylock('n-mh').then(() => null, (e) => e);
      assert.strictEqual(busy.code, 'BUSY');
      assert.match(busy.message, /^lock n-mh is held by \S+( label=\S+)?, kept \d+ ms more after its release \(minHold or a lock-delay\)$/);
      await rejectsWith(other.lock('n-mh', { wait: 0 }), 'TIMEOUT');
      const st = await c.status('n-mh');
      assert.strictEqual(st.state, 'held');
      assert.strictEqual(st.token, h.token);
      assert.ok(st.delay > 0 && st.delay <= 60000, String(st.delay));
      assert.strictEqual(await h.release(), false);     // released already
      // The keep ends (here by a BREAK): the next holder's token is greater.
      assert.strictEqual(await other.query.request('BREAK n-mh'), 'OK n-mh');
      const h2 = await other.trylock('n-mh');
      assert.ok(h2.token > h.token);
      assert.strictEqual(await h2.release(), true);
      assert.strictEqual(h2.kept, 0);                    // no minHold: at once
      assert.strictEqual((await c.status('n-mh')).state, 'free');
      // await using (Symbol.asyncDispose) keeps it the same way.
      const h3 = await c.trylock('n-mh', { minHold: 60000 });
      await h3[Symbol.asyncDispose ? Symbol.asyncDispose : Symbol.for('nodejs.asyncDispose')]();
      assert.ok(h3.kept > 0);
      await rejectsWith(other.trylock('n-mh'), 'BUSY');
    } finally {
      await other.end();
      await c.end();
    }
  });

test('minHold: a waiter is granted only after the keep', { skip: !env.LB_ADDR }, async () => {
  const c = await connectTracked(env.LB_ADDR);
  const other = await connectTracked(env.LB_ADDR);
  try {
    const beforeTake = performance.now();
    const h = await c.trylock('n-mw', { minHold: 1000 });
    const waiting = other.lock('n-mw', { wait: T })
      .then((hold) => ({ hold, at: performance.now() }));
    while ((await c.status('n-mw')).waiters === 0) { /* asks again until it is queued */ }
    const beforeRelease = performance.now();
    assert.strictEqual(await h.release(), true);
    const got = await waiting;
    // Lower bounds only: the daemon kept it h.kept ms from the release on,
    // which is at least minHold from the grant, later than beforeTake.
    assert.ok(got.at - beforeRelease >= h.kept - 1, `${got.at - beforeRelease} < ${h.kept}`);
    assert.ok(got.at - beforeTake >= 1000 - 1, `${got.at - beforeTake} < 1000`);
    assert.ok(got.hold.token > h.token);
    await got.hold.release();
  } finally {
    await other.end();
    await c.end();
  }
});

test('minHold: release({ keep: 0 }) frees at once (the work failed); keep, sets, bounds, leases',
  { skip: !env.LB_ADDR }, async () => {
    const c = await connectTracked(env.LB_ADDR);
    const other = await connectTracked(env.LB_ADDR);
    try {
      // The job failed: release at once, whatever minHold said.
      const h = await c.trylock('n-mf', { minHold: 60000 });
      await assert.rejects(async () => {
        try {
          throw new Error('the job failed');
        } catch (e) {
          await h.release({ keep: 0 });
          throw e;
        } finally {
          await h.release();          // resolves false: released already
        }
      }, /the job failed/);
      assert.strictEqual(h.kept, 0);
      assert.strictEqual((await c.status('n-mf')).state, 'free');
      await (await other.trylock('n-mf')).release();
      // An explicit keep keeps any hold that long.
      const k = await c.trylock('n-mk');
      assert.strictEqual(await k.release({ keep: 30000 }), true);
      assert.strictEqual(k.kept, 30000);
      const st = await c.status('n-mk');
      assert.strictEqual(st.token, k.token);
      assert.ok(st.delay > 0 && st.delay <= 30000, String(st.delay));
      // A set: every name kept.
      const s = await c.trylock(['n-ms-b', 'n-ms-a'], { minHold: 60000 });
      assert.strictEqual(await s.release(), true);
      assert.ok(s.kept > 0);
      await rejectsWith(other.trylock(['n-ms-a', 'n-ms-c']), 'BUSY');
      await rejectsWith(other.trylock('n-ms-b'), 'BUSY');
      for (let i = 0; i < 2; i++) {
        const one = await c.status(s.names[i]);
        assert.strictEqual(one.token, s.tokens[i]);
        assert.ok(one.delay > 0);
      }
      // Out of range: refused here, nothing sent; the hold stays held.
      for (const bad of [-1, 86400001, '60000', NaN]) {
        await assert.rejects(c.trylock('n-mb', { minHold: bad }), RangeError);
      }
      assert.strictEqual((await c.status('n-mb')).state, 'free');
      const b = await c.trylock('n-mb');
      await assert.rejects(b.release({ keep: -1 }), RangeError);
      assert.strictEqual((await c.status('n-mb')).token, b.token);
      assert.strictEqual(await b.release(), true);
      // Not for leases: the daemon keeps only a connection's own hold.
      await assert.rejects(c.lease('n-ml', 1000, { minHold: 1000 }), TypeError);
      assert.strictEqual((await c.status('n-ml')).state, 'free');
      const l = await c.lease('n-ml', 60000);
      await assert.rejects(l.release({ keep: 1000 }), TypeError);
      assert.strictEqual(await l.release(), true);
    } finally {
      await other.end();
      await c.end();
    }
  });

test('distributed: a hold released early with minHold is busy through the daemon too',
  { skip: !env.LB_DIST_ADDR }, async () => {
    const c = await connectTracked(env.LB_DIST_ADDR);
    const other = await connectTracked(env.LB_DIST_ADDR);
    try {
      const h = await c.trylock('n-zmh', { minHold: 60000 });
      assert.strictEqual(await h.release(), true);
      await rejectsWith(other.trylock('n-zmh'), 'BUSY');
      assert.ok((await other.status('n-zmh')).delay > 0);
      assert.strictEqual(await other.query.request('BREAK n-zmh'), 'OK n-zmh');
      const h2 = await other.lock('n-zmh', { wait: T });
      assert.ok(h2.token > h.token);
      await h2.release();
    } finally {
      await other.end();
      await c.end();
    }
  });

test('jeopardy: a frozen daemon makes the hold lost', { skip: !env.LB_JEOPARDY_ADDR }, async () => {
  // Without a grace: the window is the connection's bound alone (a grace adds to it).
  const c = await lb.connect({ address: env.LB_JEOPARDY_ADDR, timeout: T, grace: 0 });
  const h = await c.lock('n-j');
  assert.ok(h.safeRemaining() <= 1350);
  const lost = once(h, 'lost');
  process.kill(Number(env.LB_JEOPARDY_PID), 'SIGSTOP');
  try {
    const [reason] = await lost;
    assert.match(reason, /jeopardy/);
  } finally {
    process.kill(Number(env.LB_JEOPARDY_PID), 'SIGCONT');
  }
  assert.strictEqual(await h.release(), false);
  await c.close();
});

// Steps the wall clock under the client, as NTP may: Date.now() (and nothing
// else) reads ms later from now on. Returns the function that undoes it.
function stepWallClock(ms) {
  const real = Date.now;
  Date.now = () => real.call(Date) + ms;
  return () => { Date.now = real; };
}

// The windows the daemon answers this hold's CHECKs with; await next(n):
// n more CHECKs answered, unless the hold (or lease) is lost first.
function watchChecks(h) {
  const windows = [];
  const waiters = [];
  const request = h.conn.request.bind(h.conn);
  h.conn.request = async (line, timeout) => {
    const reply = await request(line, timeout);
    if (line.startsWith('CHECK ') && /^OK /.test(reply)) {
      windows.push(Number(reply.split(' ')[3]));
      for (const w of waiters.splice(0)) if (windows.length >= w.n) w.resolve(); else waiters.push(w);
    }
    return reply;
  };
  return {
    windows,
    next: (n) => new Promise((resolve) => waiters.push({ n: windows.length + n, resolve })),
  };
}

// Resolves when what(), a promise, does, or rejects when obj is lost first.
async function unlessLost(obj, what) {
  const ac = new AbortController();
  const lost = once(obj, 'lost', { signal: ac.signal }).then(([reason]) => {
    throw new Error(`lost: ${reason}`);
  }, () => {});
  try {
    return await Promise.race([what, lost]);
  } finally {
    ac.abort();
  }
}

test('windows and lease deadlines ignore steps of the wall clock', { skip: !env.LB_ADDR }, async () => {
  const c = await lb.connect({ address: env.LB_ADDR, timeout: T });
  const h = await c.lock('n-w');
  const checks = watchChecks(h);
  const lease = await c.lease('n-wl', 300);          // renewed every 100 ms
  const HOUR = 3600000;
  let undo = () => {};
  try {
    // An hour back, mid-hold. Nothing in between: no answer can come.
    let held = h.safeRemaining(), left = lease.remaining();
    undo = stepWallClock(-HOUR);
    assert.ok(h.safeRemaining() <= held, `window stretched: ${held} -> ${h.safeRemaining()}`);
    assert.ok(lease.remaining() <= left, `lease stretched: ${left} -> ${lease.remaining()}`);
    assert.ok(h.safeRemaining() > 0 && lease.remaining() > 0);
    // For display, safeUntil and deadline follow the wall clock as it reads now.
    assert.ok(Math.abs(h.safeUntil - Date.now() - h.safeRemaining()) <= 5, String(h.safeUntil));
    assert.ok(Math.abs(lease.deadline - Date.now() - lease.remaining()) <= 5, String(lease.deadline));
    // CHECKs and renewals go on: still no more than the daemon promised.
    await unlessLost(h, checks.next(2));
    await unlessLost(lease, once(lease, 'renewed'));
    assert.ok(h.safeRemaining() <= Math.max(...checks.windows),
      `${h.safeRemaining()} ms safe, beyond every window answered (${checks.windows})`);
    assert.ok(lease.remaining() <= 300, `${lease.remaining()} ms left of a 300 ms lease`);
    // An hour forward (two from there): nothing runs out early.
    undo();
    undo = stepWallClock(HOUR);
    assert.ok(h.safeRemaining() > 0, 'the window ran out with the wall clock');
    assert.ok(lease.remaining() > 0, 'the lease ran out with the wall clock');
    await unlessLost(h, checks.next(2));
    const renewals = lease.renewals;
    while (lease.renewals < renewals + 3) await unlessLost(lease, once(lease, 'renewed'));
    assert.strictEqual(h.lost, false);
    assert.strictEqual(lease.lost, false);
    assert.ok(h.safeRemaining() > 0 && lease.remaining() > 0);
  } catch (e) {
    h.conn.close();          // a failure leaves nothing open to keep node running
    lease.conn.close();
    await c.close();
    throw e;
  } finally {
    undo();
  }
  await h.release();
  await lease.release();
  await c.close();
});

test('jeopardy: a window runs out on time with the wall clock stepped back',
  { skip: !env.LB_JEOPARDY_ADDR }, async () => {
    const c = await lb.connect({ address: env.LB_JEOPARDY_ADDR, timeout: T, grace: 0 });
    const h = await c.lock('n-jw');
    assert.ok(h.safeRemaining() > 0);
    // A window of at most 1350 ms; the wall clock an hour back would
    // stretch it by the hour. The bound below only fails the test.
    const bound = T * Number(env.LB_TIMEOUT_SCALE || 1);
    const lost = once(h, 'lost', { signal: AbortSignal.timeout(bound) });
    const undo = stepWallClock(-3600000);
    process.kill(Number(env.LB_JEOPARDY_PID), 'SIGSTOP');
    try {
      const [reason] = await lost.catch(() => {
        throw new Error(`the hold outlived its window by ${bound} ms`);
      });
      assert.match(reason, /jeopardy/);
    } catch (e) {
      h.conn.close();
      await c.close();
      throw e;
    } finally {
      process.kill(Number(env.LB_JEOPARDY_PID), 'SIGCONT');
      undo();
    }
    assert.strictEqual(await h.release(), false);
    await c.close();
  });

// A broker of a few lines, for windows the real daemon does not give:
// answer(line, reply) calls reply(text) now, later or never.
async function fakeBroker(answer, list = []) {
  const sockets = new Set();
  const server = net.createServer((s) => {
    sockets.add(s);
    list.push(s);
    s.setEncoding('ascii');
    s.on('error', () => {});
    let buf = '';
    s.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        answer(line, (text) => { if (!s.destroyed) s.write(text + '\n'); });
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${server.address().port}`,
    close: () => { for (const s of sockets) s.destroy(); server.close(); },
  };
}

test('a window shorter than the CHECK interval is confirmed in time', async () => {
  // The client must not assume a minimum window: 99 ms, less than the
  // 100 ms between CHECKs, is asked about again before it runs out.
  let checks = 0;
  let third;
  const asked = new Promise((resolve) => { third = resolve; });
  const fake = await fakeBroker((line, reply) => {
    if (line === 'LOCK n-short') return reply('OK n-short 7');
    if (line === 'UNLOCK n-short') return reply('OK n-short');
    if (line === 'CHECK n-short 7') {
      checks++;
      reply(`OK n-short 7 ${checks === 1 ? 99 : 60000}`);
      if (checks === 3) third();     // sent once the second's answer was taken
    }
  });
  // No grace: this fake answers only what the test is about.
  const c = await lb.connect({ address: fake.address, timeout: T, grace: 0 });
  try {
    const h = await c.lock('n-short');
    await unlessLost(h, asked);
    assert.strictEqual(h.lost, false);
    assert.ok(h.safeRemaining() > 99, String(h.safeRemaining()));
    await h.release();
  } finally {
    await c.close();
    fake.close();
  }
});

test("a set's round of CHECKs waits no longer than the window left", async () => {
  // Each name's CHECK may take only what is left of the window when it is
  // sent: a slow first answer leaves the second less time, not the round's
  // start's. The second round's second CHECK is never answered: jeopardy.
  const round = { a: 0, b: 0 };
  const fake = await fakeBroker((line, reply) => {
    if (line === 'LOCK n-ra,n-rb') return reply('OK n-ra,n-rb 1,2');
    const m = /^CHECK n-r(a|b) (\d)$/.exec(line);
    if (!m) return;
    const n = ++round[m[1]];
    const ok = `OK n-r${m[1]} ${m[2]} 1000`;
    if (n === 1) reply(ok);
    else if (m[1] === 'a') setTimeout(() => reply(ok), 200);    // slow, in the window
  });
  const c = await lb.connect({ address: fake.address, timeout: T, grace: 0 });   // no GRACE here
  try {
    const h = await c.lock(['n-ra', 'n-rb']);
    const sent = [];
    const request = h.conn.request.bind(h.conn);
    h.conn.request = (line, timeout) => {
      sent.push({ line, timeout, left: h.safeRemaining() });
      return request(line, timeout);
    };
    const [reason] = await once(h, 'lost');
    assert.match(reason, /jeopardy/);
    assert.ok(sent.length >= 2, JSON.stringify(sent));
    for (const s of sent) {
      assert.ok(s.timeout <= s.left + 1, `${s.line} may wait ${s.timeout} ms, ${s.left} ms left`);
    }
    assert.strictEqual(await h.release(), false);
  } finally {
    await c.close();
    fake.close();
  }
});

// Grants every LOCK or TRYLOCK of name (tokens 1, 2, ...), answers the
// first CHECK of grant i with windows[i - 1] ms (the last one for every
// later grant) and every UNLOCK OK; log: every request, in order, each
// passed to onLine before it is answered.
async function windowsBroker(name, windows, onLine = () => {}) {
  const log = [];
  let grants = 0;
  const fake = await fakeBroker((line, reply) => {
    log.push(line);
    onLine(line);
    const w = line.split(' ');
    if ((w[0] === 'LOCK' || w[0] === 'TRYLOCK') && w[1] === name) {
      return reply(`OK ${name} ${++grants}`);
    }
    if (w[0] === 'CHECK' && w[1] === name) {
      return reply(`OK ${name} ${w[2]} ${windows[Math.min(Number(w[2]), windows.length) - 1]}`);
    }
    if (line === `UNLOCK ${name}`) return reply(`OK ${name}`);
    reply('ERR BAD_COMMAND not in this fake');
  });
  fake.log = log;
  fake.requests = (word) => log.filter((l) => l.split(' ')[0] === word);
  return fake;
}

// Issue 36: a daemon just back from a ZooKeeper outage granted with a first
// CHECK window of 0 (and took the grant back a second later).
test('a grant without a window is released and asked for again while the wait lasts', async () => {
  for (const wait of [25000, undefined]) {
    const fake = await windowsBroker('n-nw', [0, 0, 60000]);
    const c = await lb.connect({ address: fake.address, timeout: T });
    try {
      const h = await c.lock('n-nw', { wait });
      assert.strictEqual(h.session, null);     // GRACE: ERR BAD_COMMAND, as before
      assert.strictEqual(h.token, 3n);
      assert.strictEqual(h.lost, false);
      assert.ok(h.safeRemaining() > 0);
      const locks = fake.requests('LOCK');
      assert.strictEqual(locks.length, 3, JSON.stringify(fake.log));
      if (wait) {
        assert.strictEqual(locks[0], 'LOCK n-nw 25000');
        const lefts = locks.map((l) => Number(l.split(' ')[2]));
        assert.ok(lefts[0] > lefts[1] && lefts[1] > lefts[2] && lefts[2] > 0, locks.join());
      } else {
        assert.deepStrictEqual(locks, ['LOCK n-nw', 'LOCK n-nw', 'LOCK n-nw']);
      }
      assert.deepStrictEqual(fake.requests('UNLOCK'), ['UNLOCK n-nw', 'UNLOCK n-nw']);   // no keep=
      assert.strictEqual(await h.release(), true);
    } finally {
      await c.close();
      fake.close();
    }
  }
});

test('no window until the wait ends is a TIMEOUT (trylock: BUSY), every grant given back',
  async () => {
    const fake = await windowsBroker('n-nw', [0]);
    const c = await lb.connect({ address: fake.address, timeout: T });
    try {
      await assert.rejects(c.lock('n-nw', { wait: 600 }), (e) => {
        assert.strictEqual(e.code, 'TIMEOUT', e.message);
        assert.match(e.message, new RegExp('^lock n-nw not granted with time to use it within ' +
          '600 ms: granted \\d+ times, but the broker promised no time for it \\(CHECK ' +
          'answered 0\\)$'));
        return true;
      });
      assert.ok(fake.requests('LOCK').length >= 2, JSON.stringify(fake.log));
      assert.strictEqual(fake.requests('UNLOCK').length, fake.requests('LOCK').length);
      for (const [take, code, first] of [[() => c.lock('n-nw', { wait: 0 }), 'TIMEOUT', 'LOCK'],
        [() => c.trylock('n-nw'), 'BUSY', 'TRYLOCK']]) {
        const before = fake.log.length;
        await assert.rejects(take(), (e) => {
          assert.strictEqual(e.code, code, e.message);
          assert.match(e.message, /granted 1 time, but the broker promised no time for it/);
          return true;
        });
        assert.deepStrictEqual(fake.log.slice(before).map((l) => l.split(' ')[0]),
          [first, 'CHECK', 'UNLOCK']);
      }
    } finally {
      await c.close();
      fake.close();
    }
  });

test('an AbortSignal ends the asking again after a grant without a window', async () => {
  const ac = new AbortController();
  const fake = await windowsBroker('n-nw', [0], (line) => {
    if (line.startsWith('UNLOCK')) ac.abort(new Error('stop'));
  });
  const c = await lb.connect({ address: fake.address, timeout: T });
  try {
    await assert.rejects(c.lock('n-nw', { signal: ac.signal }), /^Error: stop$/);
    // GRACE first (the default grace; this fake has no sessions: as before).
    assert.deepStrictEqual(fake.log, ['GRACE 5000', 'LOCK n-nw', 'CHECK n-nw 1', 'UNLOCK n-nw']);
  } finally {
    await c.close();
    fake.close();
  }
});

test('AUTH: denied and auth failed', { skip: !env.LB_AUTH_ADDR }, async () => {
  await rejectsWith(lb.connect({ address: env.LB_AUTH_ADDR, user: 'alice', password: 'wrong' }),
    'AUTH_FAILED');
  const anon = await lb.connect({ address: env.LB_AUTH_ADDR, timeout: T });
  await rejectsWith(anon.lock('app-1'), 'NOAUTH');
  await anon.close();
  const c = await lb.connect({ address: env.LB_AUTH_ADDR, user: 'alice',
    password: env.LB_AUTH_PASSWORD, timeout: T });
  const h = await c.lock('app-1');
  await h.release();
  await rejectsWith(c.lock('other'), 'DENIED');
  await c.close();
});

test('distributed: an outage makes the hold lost and requests unavailable',
  { skip: !env.LB_DIST_ADDR }, async () => {
    const c = await lb.connect({ address: env.LB_DIST_ADDR, timeout: T });
    const h = await c.lock('n-z');
    assert.ok(h.safeRemaining() > 0);
    const lost = once(h, 'lost');
    process.kill(Number(env.LB_ZK_PID), 'SIGKILL');
    const [reason] = await lost;
    assert.match(reason, /jeopardy|zk-disconnected/);
    await rejectsWith(c.trylock('n-z2'), 'UNAVAILABLE');
    assert.strictEqual(await h.release(), false);
    await c.close();
  });
