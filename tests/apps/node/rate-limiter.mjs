// rate-limiter-flexible's RateLimiterRedis (on ioredis) used as its users
// use it, against the server on the port given as argv[2]: many clients,
// each with its own connection and limiter as separate app servers would
// have, fire requests at once. Limiters with a duration consume through a
// Lua script (EVALSHA), those without through MULTI/EXEC, and `get`,
// `block`, `set` use MULTI. Exactly `points` are granted, never more, and
// the counts add up; exits non-zero otherwise.
import Redis from "ioredis";
import { RateLimiterRedis, RateLimiterRes } from "rate-limiter-flexible";

const port = Number(process.argv[2]);
const CLIENTS = 20;

function fail(message) {
  console.log(`FAIL: ${message}`);
  process.exit(1);
}

const clients = Array.from({ length: CLIENTS }, () => new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 1 }));
await Promise.all(clients.map((c) => c.ping()));
const admin = clients[0];

function limiters(options) {
  return clients.map((storeClient) => new RateLimiterRedis({ storeClient, ...options }));
}

// Fires every request at once; `points(i)` is request i's cost. Returns the
// granted and refused replies; anything but a RateLimiterRes refusal fails.
async function storm(pool, key, requests, points = () => 1) {
  const results = await Promise.allSettled(
    Array.from({ length: requests }, (_, i) => pool[i % pool.length].consume(key, points(i))),
  );
  const granted = [];
  const refused = [];
  for (const r of results) {
    if (r.status === "fulfilled") granted.push(r.value);
    else if (r.reason instanceof RateLimiterRes) refused.push(r.reason);
    else fail(`consume failed: ${r.reason}`);
  }
  return { granted, refused };
}

// Every consume returns the counter after its own increment: with atomic
// increments these are all distinct, and the granted ones are exactly those
// at or under the limit.
function checkStorm(name, { granted, refused }, limit, costs) {
  const total = costs.reduce((a, b) => a + b, 0);
  const all = [...granted, ...refused].map((r) => r.consumedPoints);
  if (new Set(all).size !== all.length) fail(`${name}: two requests saw the same counter`);
  if (Math.max(...all) !== total) fail(`${name}: final count ${Math.max(...all)}, expected ${total}`);
  for (const r of granted) {
    if (r.consumedPoints > limit) fail(`${name}: granted at ${r.consumedPoints} over a limit of ${limit}`);
    if (r.remainingPoints !== limit - r.consumedPoints) fail(`${name}: remainingPoints ${r.remainingPoints} at ${r.consumedPoints}`);
  }
  for (const r of refused) {
    if (r.consumedPoints <= limit) fail(`${name}: refused at ${r.consumedPoints} within a limit of ${limit}`);
    if (r.remainingPoints !== 0) fail(`${name}: refused with remainingPoints ${r.remainingPoints}`);
  }
}

// 1. Lua: one key, 1000 requests of 1 point against a limit of 137.
const lua = limiters({ keyPrefix: "rlf-lua", points: 137, duration: 60 });
await lua[0].delete("user");
const one = await storm(lua, "user", 1000);
checkStorm("lua", one, 137, Array(1000).fill(1));
console.log(`rate-limiter lua: ${one.granted.length} granted, ${one.refused.length} refused of 1000 (limit 137)`);
if (one.granted.length !== 137) fail(`lua: ${one.granted.length} granted, expected exactly 137`);
const state = await lua[5].get("user");
if (state.consumedPoints !== 1000) fail(`lua: get() says ${state.consumedPoints} consumed, expected 1000`);
if (!(state.msBeforeNext > 0 && state.msBeforeNext <= 60000)) fail(`lua: msBeforeNext ${state.msBeforeNext}`);

// 2. Lua: ten keys (spread over the shards) at once, requests of 1-3 points.
const users = Array.from({ length: 10 }, (_, i) => `user${i}`);
await Promise.all(users.map((u) => lua[0].delete(u)));
const cost = (u, i) => 1 + ((u * 7 + i) % 3);
const storms = await Promise.all(users.map((u, n) => storm(lua, u, 150, (i) => cost(n, i))));
storms.forEach((s, n) => {
  const costs = Array.from({ length: 150 }, (_, i) => cost(n, i));
  checkStorm(`lua ${users[n]}`, s, 137, costs);
});
console.log(`rate-limiter lua: ${users.length} keys x 150 weighted requests exact`);

// 3. MULTI: a limiter without a duration consumes through MULTI/EXEC.
const multi = limiters({ keyPrefix: "rlf-multi", points: 137, duration: 0 });
await multi[0].delete("user");
const three = await storm(multi, "user", 1000);
checkStorm("multi", three, 137, Array(1000).fill(1));
console.log(`rate-limiter multi: ${three.granted.length} granted, ${three.refused.length} refused of 1000 (limit 137)`);
if (three.granted.length !== 137) fail(`multi: ${three.granted.length} granted, expected exactly 137`);
const multiState = await multi[3].get("user");
if (multiState.consumedPoints !== 1000) fail(`multi: get() says ${multiState.consumedPoints}, expected 1000`);

// 4. block / set / delete (MULTI of SET EX and PTTL).
await lua[0].delete("blocked");
await lua[1].block("blocked", 30);
try {
  await lua[2].consume("blocked");
  fail("a blocked key was granted");
} catch (error) {
  if (!(error instanceof RateLimiterRes)) fail(`consume of a blocked key: ${error}`);
  if (!(error.msBeforeNext > 25000)) fail(`blocked msBeforeNext ${error.msBeforeNext}`);
}
await lua[3].set("blocked", 5, 20);
const afterSet = await lua[4].get("blocked");
if (afterSet.consumedPoints !== 5) fail(`after set: ${afterSet.consumedPoints} consumed, expected 5`);
if (!(await lua[4].delete("blocked"))) fail("delete of an existing key answered false");
const fresh = await lua[5].consume("blocked", 2);
if (fresh.consumedPoints !== 2) fail(`after delete: ${fresh.consumedPoints} consumed, expected 2`);

// 5. penalty and reward keep the books.
await lua[0].delete("books");
await lua[0].consume("books", 10);
await Promise.all(clients.map((_, i) => (i % 2 ? lua[i].penalty("books", 3) : lua[i].reward("books", 1))));
const books = await lua[7].get("books");
const want = 10 + (CLIENTS / 2) * 3 - CLIENTS / 2;
if (books.consumedPoints !== want) fail(`penalty/reward: ${books.consumedPoints}, expected ${want}`);

console.log("node rate-limiter-flexible: all passed");
process.exit(0);
