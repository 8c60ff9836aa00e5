'use strict';
// The library through the daemon's TLS listener. Run by
// tests/e2e/test_client_node.py (before client.test.js, whose last test
// stops ZooKeeper), which makes throw-away certificates with the openssl
// command and starts the daemons:
//   LB_TLS_ADDR: embedded, [tls] with client_certs = optional, no users;
//     LB_TLS_PLAIN_ADDR is the same daemon's plain port, LB_TLS_PID its pid
//     (the handover test's SIGUSR2)
//   LB_TLS_LOGIN_ADDR: [tls] with client_certs = required and a users file
//     (alice, pattern app-*)
//   LB_TLS_DIST_ADDR: distributed, [tls]; LB_DIST_ADDR is another daemon of
//     the same ZooKeeper, plain
//   LB_TLS_CA, LB_TLS_OTHER_CA (another CA), LB_TLS_SERVER_CERT and _KEY
//     (the daemons' certificate, for 127.0.0.1 and localhost),
//     LB_TLS_ALICE_CERT and _KEY (CN alice), LB_TLS_FORGED_CERT and _KEY
//     (CN alice, signed by the other CA).
// Without them (no openssl command) every test here is skipped. Waits are
// for events (replies, 'lost', 'renewed'); nothing sleeps to synchronise.
const test = require('node:test');
const assert = require('node:assert');
const { once } = require('node:events');
const fs = require('node:fs');
const net = require('node:net');
const tls = require('node:tls');
const lb = require('..');

const env = process.env;
const T = 10000;
const NO_TLS = !env.LB_TLS_ADDR;

const read = (name) => fs.readFileSync(env[name]);
const ca = () => read('LB_TLS_CA');
const alice = () => ({ cert: read('LB_TLS_ALICE_CERT'), key: read('LB_TLS_ALICE_KEY') });

async function rejectsWith(promise, code, message) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof lb.LockbrokerError, String(e));
    assert.strictEqual(e.code, code, e.message);
    if (message) assert.match(e.message, message);
    return true;
  });
}

// One request on a plain connection of its own (for BREAK, which the library has not).
function plainRequest(address, line) {
  const { host, port } = lb.parseAddress(address);
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port }, () => s.write(line + '\n'));
    let buf = '';
    s.setEncoding('ascii');
    s.on('data', (d) => {
      buf += d;
      const i = buf.indexOf('\n');
      if (i >= 0) {
        s.end();
        resolve(buf.slice(0, i));
      }
    });
    s.on('error', reject);
  });
}

const NOT_VERIFIED = /^cannot connect to 127\.0\.0\.1:\d+: TLS: the broker's certificate did not verify \(.+\): check the CA and the host name$/;
const REFUSED = /^cannot connect to 127\.0\.0\.1:\d+: TLS: the broker refused the session: .*alert/;

test('over TLS: lock, wait, LOST by a BREAK, CHECK, a lease', { skip: NO_TLS }, async () => {
  const c = await lb.connect({ address: env.LB_TLS_ADDR, tls: { ca: ca() }, timeout: T });
  const h = await c.lock('t');
  assert.strictEqual(h.conn.socket.encrypted, true);
  assert.ok(h.safeRemaining() > 0);                 // CHECK answered
  assert.strictEqual((await c.status('t')).token, h.token);
  const waiting = c.lock('t', { wait: T });
  while ((await c.status('t')).waiters === 0) { /* asks again: an answer each time */ }
  await h.release();
  const h2 = await waiting;
  assert.ok(h2.token > h.token);
  assert.ok(h2.safeRemaining() > 0);
  // LOST: broken through the plain port, pushed over TLS.
  const lost = once(h2, 'lost');
  assert.strictEqual(await plainRequest(env.LB_TLS_PLAIN_ADDR, 'BREAK t'), 'OK t');
  assert.deepStrictEqual(await lost, ['broken']);
  assert.strictEqual(await h2.release(), false);
  const lease = await c.lease('tl', 300);
  assert.strictEqual(lease.conn.socket.encrypted, true);
  await once(lease, 'renewed');
  await once(lease, 'renewed');
  assert.strictEqual((await c.status('tl')).token, lease.token);
  assert.strictEqual(await lease.release(), true);
  assert.strictEqual((await c.status('tl')).state, 'free');
  assert.ok((await c.stats()).grants >= 3);         // a multi-line answer
  await c.close();
});

test('over TLS: a pipelined burst of 5000 PINGs comes back whole', { skip: NO_TLS }, async () => {
  // 25000 bytes of PONGs: TLS records of up to 16384 bytes, several lines
  // in a record and lines cut between records.
  const c = await lb.connect({ address: env.LB_TLS_ADDR, tls: { ca: ca() }, timeout: T });
  const conn = await c.newConn();
  conn.socket.write('PING\n'.repeat(5000));
  for (let i = 0; i < 5000; i++) assert.strictEqual(await conn.next(), 'PONG', `reply ${i}`);
  assert.strictEqual(await conn.request('PING'), 'PONG');
  conn.close();
  await c.close();
});

test('over TLS: lines cut across records (a broker of our own)', { skip: NO_TLS }, async () => {
  // Each piece is written once the one before has gone: a TLS record each.
  const write = (s, piece) => new Promise((resolve) => s.write(piece, resolve));
  const sockets = new Set();
  const server = tls.createServer({ cert: read('LB_TLS_SERVER_CERT'), key: read('LB_TLS_SERVER_KEY') },
    (s) => {
      sockets.add(s);
      s.setEncoding('ascii');
      s.on('error', () => {});
      let buf = '';
      s.on('data', async (d) => {
        buf += d;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line === 'PING') await write(s, 'PONG\n');
          if (line === 'STATS') {
            for (const piece of ['STAT a 1\nSTAT b 2\nST', 'AT c', ' 3\nE', 'ND\n']) await write(s, piece);
          }
        }
      });
    });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const c = await lb.connect({ address: `127.0.0.1:${server.address().port}`, tls: { ca: ca() },
      timeout: T });
    assert.deepStrictEqual(await c.stats(), { a: 1, b: 2, c: 3 });
    await c.ping();
    await c.close();
  } finally {
    for (const s of sockets) s.destroy();
    server.close();
  }
});

// Issue 38: a handover closes TLS connections (OpenSSL cannot pass a TLS
// session to another process); a hold with a grace is detached, carried,
// and taken back on the successor, its token unchanged.
test('over TLS: a hold survives a handover (SIGUSR2)',
  { skip: NO_TLS || !env.LB_TLS_PID }, async () => {
  const c = await lb.connect({ address: env.LB_TLS_ADDR, tls: { ca: ca() }, timeout: T, grace: T });
  try {
    const h = await c.lock('tls-ho');
    const token = h.token;
    const resumed = once(h, 'resumed');
    process.kill(Number(env.LB_TLS_PID), 'SIGUSR2');
    await resumed;
    assert.strictEqual(h.lost, false, h.lostReason);
    assert.strictEqual(h.token, token);
    assert.strictEqual((await c.status('tls-ho')).token, token);
    assert.strictEqual(await h.release(), true);
    assert.strictEqual((await c.status('tls-ho')).state, 'free');
  } finally {
    await c.close();
  }
});

test('over TLS: the broker must show a certificate we trust', { skip: NO_TLS }, async () => {
  await rejectsWith(lb.connect({ address: env.LB_TLS_ADDR, tls: { ca: read('LB_TLS_OTHER_CA') },
    timeout: T }), 'CONNECTION_LOST', NOT_VERIFIED);
  await rejectsWith(lb.connect({ address: env.LB_TLS_ADDR,
    tls: { ca: ca(), servername: 'locks.example.net' }, timeout: T }), 'CONNECTION_LOST', NOT_VERIFIED);
  // The name to check can be given: the certificate is for localhost too.
  const c = await lb.connect({ address: env.LB_TLS_ADDR, tls: { ca: ca(), servername: 'localhost' },
    timeout: T });
  await (await c.trylock('sh')).release();
  await c.close();
  // Plain text to the TLS port is no substitute.
  const plain = await lb.connect({ address: env.LB_TLS_ADDR, timeout: T });
  await rejectsWith(plain.ping(), 'CONNECTION_LOST');
  await plain.close();
});

test('over TLS: a certificate login', { skip: NO_TLS }, async () => {
  const c = await lb.connect({ address: env.LB_TLS_LOGIN_ADDR, tls: { ca: ca(), ...alice() },
    timeout: T });
  const h = await c.lock('app-1');
  assert.strictEqual((await c.status('app-1')).token, h.token);
  assert.strictEqual(await h.release(), true);
  await rejectsWith(c.lock('db'), 'DENIED', /ERR DENIED user alice may not use lock db$/);
  const lease = await c.lease('app-l', 30000);        // a connection of its own
  assert.strictEqual((await c.status('app-l')).token, lease.token);
  assert.strictEqual(await lease.release(), true);
  await c.close();
});

test('over TLS: certificates the daemon refuses', { skip: NO_TLS }, async () => {
  await rejectsWith(lb.connect({ address: env.LB_TLS_LOGIN_ADDR, tls: { ca: ca() }, timeout: T }),
    'CONNECTION_LOST', REFUSED);
  await rejectsWith(lb.connect({ address: env.LB_TLS_LOGIN_ADDR, timeout: T,
    tls: { ca: ca(), cert: read('LB_TLS_FORGED_CERT'), key: read('LB_TLS_FORGED_KEY') } }),
  'CONNECTION_LOST', REFUSED);
});

test('distributed over TLS: a TLS client of one daemon, a plain one of another',
  { skip: !env.LB_TLS_DIST_ADDR }, async () => {
    const a = await lb.connect({ address: env.LB_TLS_DIST_ADDR, tls: { ca: ca() }, timeout: T });
    const b = await lb.connect({ address: env.LB_DIST_ADDR, timeout: T });
    const h = await a.lock('n-tx');
    assert.ok(h.safeRemaining() > 0);
    await rejectsWith(b.trylock('n-tx'), 'BUSY');
    const waiting = b.lock('n-tx', { wait: T });
    while ((await b.holders('n-tx')).length < 2) { /* asks again: an answer each time */ }
    assert.strictEqual(await h.release(), true);
    const h2 = await waiting;
    assert.ok(h2.token > h.token);
    await h2.release();
    const lease = await a.lease('n-tlx', 30000);
    assert.strictEqual((await b.status('n-tlx')).state, 'held');
    assert.strictEqual(await lease.release(), true);
    await a.close();
    await b.close();
  });
