// Times ioredis or node-redis through a server restart:
//   node restart_probe.js ioredis|node-redis HOST PORT
// Prints "ready" once connected; then for each line on stdin ("both" or
// "incr"), retries NEXTID (for "both") and then INCR every 5 ms until each
// succeeds, printing "nextid MS" and "incr MS" (Unix time in milliseconds).
// The client keeps its default options: it reconnects and queues as in
// production. The modules come from NODE_PATH.
'use strict';
const readline = require('readline');
const [lib, host, port] = process.argv.slice(2);

async function main() {
  let call;
  if (lib === 'ioredis') {
    const Redis = require('ioredis');
    const c = new Redis({ host, port: Number(port) });
    c.on('error', () => {});
    call = (args) => c.call(...args);
  } else {
    const { createClient } = require('redis');
    const c = createClient({ socket: { host, port: Number(port) } });
    c.on('error', () => {});
    await c.connect();
    call = (args) => c.sendCommand(args);
  }
  await call(['PING']);
  console.log('ready');
  const first = async (args) => {
    for (;;) {
      try {
        await call(args);
        return Date.now();
      } catch (e) {
        await new Promise((r) => setTimeout(r, 5));
      }
    }
  };
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (line.trim() === 'both') console.log('nextid ' + (await first(['NEXTID'])));
    console.log('incr ' + (await first(['INCR', 'restart'])));
  }
  process.exit(0);
}
main().catch((e) => { console.error(e); process.exit(1); });
