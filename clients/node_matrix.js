// Drives idserver with the npm clients ioredis and redis (node-redis):
//   node node_matrix.js HOST PORT [PASSWORD]
// Prints one "PASS client proto" line per cell; exits 1 on the first failure.
// The modules come from NODE_PATH (.ci/run npm-installs them into a temp folder).
// With IDSERVER_ID_BITS=53 (a server started with --id-bits 53) it also checks
// that both clients, with no option, read IDs as exact JavaScript numbers.
'use strict';
const assert = require('assert');
const [host, port, password] = process.argv.slice(2);

async function check(name, call) {
  const id = Number(await call(['NEXTID']));
  assert.ok(id > 0, `${name}: NEXTID ${id}`);
  const ids = await call(['NEXTID', '3']);
  assert.strictEqual(ids.length, 3, `${name}: NEXTID 3`);
  const gid = BigInt(await call(['GENEID', '12345']));
  assert.strictEqual(gid % 16n, 12345n % 16n, `${name}: GENEID routes with its buyer`);
  let dec = await call(['DECODE', String(gid)]);
  if (Array.isArray(dec)) {
    const m = {};
    for (let i = 0; i < dec.length; i += 2) m[dec[i]] = dec[i + 1];
    dec = m;
  } else if (dec instanceof Map) {
    dec = Object.fromEntries(dec);
  }
  assert.strictEqual(Number(dec.gene), 12345 % 256, `${name}: DECODE gene ${JSON.stringify(dec)}`);
  const seg = await call(['NEXTSEG', 'node-tag', '10']);
  assert.strictEqual(Number(seg[1]) - Number(seg[0]), 9, `${name}: NEXTSEG ${seg}`);
  const a = Number(await call(['INCR', 'node-tag']));
  const b = Number(await call(['INCR', 'node-tag']));
  assert.ok(b > a && a > Number(seg[1]), `${name}: INCR ${a} ${b} after ${seg}`);
  return dec;
}

async function ioredis() {
  const Redis = require('ioredis');
  // IDs are above 2^53: stringNumbers keeps them exact (else JS numbers round them).
  const c = new Redis({ host, port: Number(port), password: password || undefined, lazyConnect: true,
    maxRetriesPerRequest: 1, stringNumbers: true });
  await c.connect(); // runs ioredis's ready check, which parses INFO
  try {
    await check('ioredis', (args) => c.call(...args));
    // multi() is a transaction: MULTI, the commands, EXEC.
    const res = await c.multi().incr('io-tx').incrby('io-tx', 5).set('io-seed', '1000000', 'NX').get('io-seed').exec();
    assert.deepStrictEqual(res, [[null, '1'], [null, '6'], [null, 'OK'], [null, '1000000']], `ioredis multi ${JSON.stringify(res)}`);
    assert.strictEqual(await c.set('io-seed', '5', 'NX'), null, 'ioredis second SET NX');
    assert.strictEqual(String(await c.incr('io-seed')), '1000001', 'ioredis INCR after SET NX');
  } finally {
    c.disconnect();
  }
  console.log('PASS ioredis RESP2');
}

async function nodeRedis(resp) {
  const { createClient, RESP_TYPES } = require('redis');
  const opts = { socket: { host, port: Number(port), reconnectStrategy: false } };
  if (password) opts.password = password;
  if (resp === 3) opts.RESP = 3;
  const c = createClient(opts);
  c.on('error', () => {});
  await c.connect();
  try {
    // IDs are above 2^53: map integer replies to strings to keep them exact.
    const exact = c.withTypeMapping({ [RESP_TYPES.NUMBER]: String, [RESP_TYPES.BIG_NUMBER]: String });
    const dec = await check(`node-redis RESP${resp}`, (args) => exact.sendCommand(args));
    if (resp === 3) assert.ok(dec && typeof dec === 'object', 'RESP3 DECODE is a map');
    // multi() is a transaction: MULTI, the commands, EXEC.
    const tx = `nr-tx-${resp}`, seed = `nr-seed-${resp}`;
    const res = await c.multi().incr(tx).incrBy(tx, 5).set(seed, '1000000', { NX: true }).get(seed).exec();
    assert.deepStrictEqual(res.map(String), ['1', '6', 'OK', '1000000'], `node-redis multi ${JSON.stringify(res)}`);
    assert.strictEqual(await c.set(seed, '5', { NX: true }), null, 'node-redis second SET NX');
    assert.strictEqual(Number(await c.incr(seed)), 1000001, 'node-redis INCR after SET NX');
  } finally {
    await c.quit().catch(() => {});
  }
  console.log(`PASS node-redis RESP${resp}`);
}

// exact checks, with a client's default replies (no stringNumbers, no type
// mapping), that 53-bit IDs arrive as safe integers that are the IDs: DECODE
// of the number gives back worker 0 and the buyer's gene (a rounded 63-bit
// ID decodes to another worker and loses its low bits), and NEXTID's
// numbers strictly increase.
async function exact(name, call) {
  const ids = [];
  for (let i = 0; i < 50; i++) ids.push(await call(['NEXTID']));
  ids.push(...await call(['NEXTID', '100']));
  const gid = await call(['GENEID', '12345']);
  for (const id of [...ids, gid]) {
    assert.ok(typeof id === 'number' && Number.isSafeInteger(id) && id > 0, `${name}: ${typeof id} ${id} is not a safe integer`);
  }
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], `${name}: NEXTID ${ids[i]} after ${ids[i - 1]}`);
  let dec = await call(['DECODE', String(gid)]);
  if (Array.isArray(dec)) {
    const m = {};
    for (let i = 0; i < dec.length; i += 2) m[dec[i]] = dec[i + 1];
    dec = m;
  } else if (dec instanceof Map) {
    dec = Object.fromEntries(dec);
  }
  assert.strictEqual(Number(dec.worker), 0, `${name}: DECODE of the number ${gid}: ${JSON.stringify(dec)}`);
  const geneBits = Number(process.env.IDSERVER_GENE_BITS || 6);
  assert.strictEqual(Number(dec.gene), 12345 % 2 ** geneBits, `${name}: DECODE gene ${JSON.stringify(dec)}`);
  assert.strictEqual(gid % 16, 12345 % 16, `${name}: GENEID ${gid} routes with its buyer`);
  console.log(`PASS ${name} exact 53-bit numbers`);
}

async function exact53() {
  const Redis = require('ioredis');
  const io = new Redis({ host, port: Number(port), password: password || undefined, lazyConnect: true, maxRetriesPerRequest: 1 });
  await io.connect();
  try {
    await exact('ioredis', (args) => io.call(...args));
  } finally {
    io.disconnect();
  }
  const { createClient } = require('redis');
  for (const resp of [2, 3]) {
    const opts = { socket: { host, port: Number(port), reconnectStrategy: false } };
    if (password) opts.password = password;
    if (resp === 3) opts.RESP = 3;
    const c = createClient(opts);
    c.on('error', () => {});
    await c.connect();
    try {
      await exact(`node-redis RESP${resp}`, (args) => c.sendCommand(args));
    } finally {
      await c.quit().catch(() => {});
    }
  }
}

(async () => {
  await ioredis();
  await nodeRedis(2);
  await nodeRedis(3);
  if (process.env.IDSERVER_ID_BITS === '53') await exact53();
})().catch((e) => {
  console.error('FAIL', e && e.stack || e);
  process.exit(1);
});
