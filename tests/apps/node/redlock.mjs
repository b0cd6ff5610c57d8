// node-redlock (v5, on ioredis) used as its users use it, against the
// server on the port given as argv[2]: many workers, each with its own
// connection and Redlock instance as separate processes would have, contend
// for single- and multi-resource locks (the acquire/extend/release Lua
// scripts run over keys on different shards). Mutual exclusion, counts and
// lock ownership must come out exact; exits non-zero otherwise.
import Redis from "ioredis";
import Redlock, { ExecutionError, ResourceLockedError } from "redlock";

const port = Number(process.argv[2]);
const WORKERS = 16;
const ROUNDS = 15;
// With 3 shards: res:a on shard 2, res:b on 1, res:c on 0.
const RESOURCES = ["res:a", "res:b", "res:c"];

function fail(message) {
  console.log(`FAIL: ${message}`);
  process.exit(1);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const unexpected = [];
// Redlock turns the server's errors into "unable to achieve a quorum":
// name the server's own errors too.
process.on("uncaughtException", (error) => {
  const causes = unexpected.slice(0, 3).map(String).join("; ");
  fail(`${error}${causes ? `; the server's errors: ${causes}` : ""}`);
});

function connect() {
  return new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 1 });
}

function redlockOn(client, settings = {}) {
  const redlock = new Redlock([client], { retryCount: 400, retryDelay: 4, retryJitter: 4, ...settings });
  // Redlock reports every failed vote here; "locked by someone else" is the
  // normal outcome of contention, anything else is a failure.
  redlock.on("error", (error) => {
    if (!(error instanceof ResourceLockedError)) unexpected.push(error);
  });
  return redlock;
}

const admin = connect();
await admin.del(...RESOURCES, "rl:count", "rl:count:a", "rl:count:b", "rl:count:c");
const workers = Array.from({ length: WORKERS }, () => {
  const client = connect();
  return { client, redlock: redlockOn(client) };
});

// 1. One resource: a read-modify-write that is only right under the lock.
const holders = new Map();
let overlaps = 0;
async function critical(resources, lock, work) {
  for (const r of resources) {
    if (holders.has(r)) overlaps += 1;
    holders.set(r, lock.value);
  }
  for (const r of resources) {
    const stored = await admin.get(r);
    if (stored !== lock.value) fail(`lock key ${r} holds ${stored}, not the holder's ${lock.value}`);
  }
  await work();
  for (const r of resources) {
    if (holders.get(r) !== lock.value) overlaps += 1;
    holders.delete(r);
  }
}

async function incrementUnsafely(client, key) {
  const value = Number((await client.get(key)) ?? 0);
  await sleep(1);
  await client.set(key, value + 1);
}

await Promise.all(
  workers.map(async ({ client, redlock }) => {
    for (let n = 0; n < ROUNDS; n++) {
      const lock = await redlock.acquire(["res:c"], 5000);
      await critical(["res:c"], lock, () => incrementUnsafely(client, "rl:count"));
      if (n % 4 === 0) {
        const extended = await lock.extend(5000);
        if (extended.value !== lock.value) fail("extend changed the lock's value");
        await extended.release();
      } else {
        await lock.release();
      }
    }
  }),
);
const single = Number(await admin.get("rl:count"));
console.log(`redlock single resource: ${single} increments, ${overlaps} overlaps`);
if (overlaps !== 0) fail(`${overlaps} overlapping critical sections`);
if (single !== WORKERS * ROUNDS) fail(`counter ${single}, expected ${WORKERS * ROUNDS}`);

// 2. Two resources at once (on different shards): one script over both keys.
const pairs = [
  ["res:a", "res:b"],
  ["res:b", "res:c"],
  ["res:c", "res:a"],
];
const expected = { "res:a": 0, "res:b": 0, "res:c": 0 };
await Promise.all(
  workers.map(async ({ client, redlock }, w) => {
    for (let n = 0; n < ROUNDS; n++) {
      const pair = pairs[(w + n) % pairs.length];
      const lock = await redlock.acquire(pair, 5000);
      await critical(pair, lock, async () => {
        for (const r of pair) {
          expected[r] += 1;
          await incrementUnsafely(client, `rl:count:${r.slice(4)}`);
        }
      });
      await lock.release();
    }
  }),
);
for (const r of RESOURCES) {
  const got = Number(await admin.get(`rl:count:${r.slice(4)}`));
  if (got !== expected[r]) fail(`multi-resource counter of ${r}: ${got}, expected ${expected[r]}`);
}
if (overlaps !== 0) fail(`${overlaps} overlapping multi-resource critical sections`);
if ((await admin.exists(...RESOURCES)) !== 0) fail("lock keys outlived their release");
console.log(`redlock multi resource: counts ${JSON.stringify(expected)} exact, 0 overlaps`);

// 3. Ownership: a held lock is not granted again, a stranger cannot take it
// over, a lock extends itself while `using` runs, and an expired lock
// cannot be extended.
const impatient = redlockOn(connect(), { retryCount: 0 });
const held = await workers[0].redlock.acquire(RESOURCES, 5000);
try {
  await impatient.acquire(["res:b"], 5000);
  fail("a held lock was granted to a second owner");
} catch (error) {
  if (!(error instanceof ExecutionError)) fail(`second acquire: ${error}`);
}
await held.release();
if ((await admin.exists(...RESOURCES)) !== 0) fail("release left lock keys behind");

const auto = redlockOn(connect(), { automaticExtensionThreshold: 200 });
await auto.using(["res:a", "res:b"], 400, async (signal) => {
  await sleep(700);
  if (signal.aborted) fail(`automatic extension failed: ${signal.error}`);
  const ttl = await admin.pttl("res:a");
  if (!(ttl > 0)) fail(`lock not extended while in use: PTTL ${ttl}`);
});

const short = await workers[1].redlock.acquire(["res:c"], 100);
await sleep(250);
try {
  await short.extend(1000);
  fail("an expired lock was extended");
} catch (error) {
  if (!(error instanceof ExecutionError)) fail(`extend after expiry: ${error}`);
}

const other = unexpected.filter((e) => !(e instanceof ResourceLockedError));
if (other.length) fail(`unexpected errors: ${other.slice(0, 3).join("; ")}`);
console.log("redlock: ownership checks passed");
console.log("node redlock: all passed");
process.exit(0);
