// ioredis's Cluster and sentinels against idserver, driven by
// systest/clientmodes: connect with default options (stringNumbers, as
// IDs exceed 2^53), INCR, NEXTID, a pipeline and a transaction, print
// PHASE1, wait for a line on stdin (the test has killed the node in use),
// retry INCR until one succeeds, print the outage, run the same commands
// again and print every value as JSON.
//
// usage: node cluster_modes.js cluster|sentinel tag host:port ...
const Redis = require("ioredis");
const readline = require("readline");

const [mode, tag, ...addrs] = process.argv.slice(2);
const hosts = addrs.map((a) => {
  const i = a.lastIndexOf(":");
  return { host: a.slice(0, i), port: Number(a.slice(i + 1)) };
});
const client = mode === "cluster"
  ? new Redis.Cluster(hosts, { redisOptions: { stringNumbers: true } })
  : new Redis({ sentinels: hosts, name: "mymaster", stringNumbers: true });
client.on("error", () => {}); // the kill's errors: the commands below report what matters

const incrs = [];
const ids = [];

async function exercise() {
  for (let i = 0; i < 3; i++) incrs.push(String(await client.incr(tag)));
  for (let i = 0; i < 3; i++) ids.push(String(await client.call("NEXTID")));
  const piped = await client.pipeline().incr(tag).incr(tag).exec();
  for (const [err, v] of piped) {
    if (err) throw err;
    incrs.push(String(v));
  }
  const tx = await client.multi().incr(tag).incr(tag).exec();
  for (const [err, v] of tx) {
    if (err) throw err;
    incrs.push(String(v));
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  await exercise();
  console.log("PHASE1");
  const rl = readline.createInterface({ input: process.stdin });
  await new Promise((resolve) => rl.once("line", resolve));
  rl.close();
  const killed = Date.now();
  let last;
  for (;;) {
    try {
      incrs.push(String(await client.incr(tag)));
      break;
    } catch (e) {
      last = e;
      if (Date.now() - killed > 60000) {
        console.log("FAIL no INCR within 60s of the kill: " + last);
        process.exit(1);
      }
      await sleep(5);
    }
  }
  const outage = Date.now() - killed;
  await exercise();
  console.log("RESULT " + JSON.stringify({ outage_ms: outage, incr: incrs, nextid: ids }));
  client.disconnect();
}

main().catch((e) => {
  console.log("FAIL " + (e && e.stack ? e.stack : e));
  process.exit(1);
});
