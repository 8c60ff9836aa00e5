#!/usr/bin/env node
'use strict';
// node_client_cost.js - one lock/unlock cycle through the Node.js client
// (clients/node) against the raw protocol on one kept connection, same
// daemon, same run. Usage: node bench/node_client_cost.js HOST:PORT [CYCLES] [ROUNDS]
const net = require('node:net');
const path = require('node:path');
const lb = require(path.join(__dirname, '..', 'clients', 'node'));

const [addr = '127.0.0.1:7411', n = '2000', r = '3'] = process.argv.slice(2);
const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))];

function raw(name, cycles) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port }, () => s.write(`LOCK ${name}\n`));
    s.setNoDelay(true);
    let buf = '', left = cycles * 2;
    s.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (--left === 0) { s.destroy(); return resolve(); }
        s.write(line.startsWith('OK ') && line.split(' ').length === 3 ? `UNLOCK ${name}\n` : `LOCK ${name}\n`);
      }
    });
  });
}

async function library(client, name, cycles) {
  for (let i = 0; i < cycles; i++) await (await client.lock(name)).release();
}

(async () => {
  const cycles = Number(n), rounds = Number(r), name = `nodecost-${process.pid}`;
  const checked = await lb.connect({ address: addr });
  const unchecked = await lb.connect({ address: addr, check: false });
  const rows = [['raw', () => raw(name, cycles)], ['library', () => library(checked, name, cycles)],
    ['library, check=false', () => library(unchecked, name, cycles)]];
  const times = Object.fromEntries(rows.map(([k]) => [k, []]));
  for (let i = 0; i < rounds; i++) {
    for (const [k, fn] of rows) {
      const t0 = process.hrtime.bigint();
      await fn();
      times[k].push(Number(process.hrtime.bigint() - t0) / 1e3 / cycles);
    }
  }
  console.log(`${''.padEnd(22)} ${'us/cycle'.padStart(10)} ${'cycles/s'.padStart(10)}   (${rounds} x ${cycles} cycles, medians)`);
  for (const [k] of rows) {
    const t = times[k].sort((a, b) => a - b)[Math.floor(times[k].length / 2)];
    console.log(`${k.padEnd(22)} ${t.toFixed(0).padStart(10)} ${(1e6 / t).toFixed(0).padStart(10)}`);
  }
  await checked.close();
  await unchecked.close();
})();
