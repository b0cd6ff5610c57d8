// ioredis in subscriber mode: several subscriber connections (spread over
// the server's cores), channels and patterns, a publisher counting
// receivers. Exits non-zero with the reason when a count is off.
import Redis from "ioredis";

const port = Number(process.argv[2]);
const fail = (why) => {
  console.error(why);
  process.exit(1);
};
const timer = setTimeout(() => fail("timed out"), 30000);

const subscribers = [];
let received = 0;
for (let i = 0; i < 6; i++) {
  const sub = new Redis({ port, lazyConnect: true });
  await sub.connect();
  const n = await sub.subscribe("orders", "alerts");
  if (n !== 2) fail(`subscribe count ${n}`);
  await sub.psubscribe("ord*");
  sub.on("message", (channel, message) => {
    if (channel === "orders" && message === "o1") received++;
  });
  sub.on("pmessage", (pattern, channel, message) => {
    if (pattern === "ord*" && channel === "orders" && message === "o1") received++;
  });
  // Subscriber mode: other commands are refused by the client itself.
  subscribers.push(sub);
}
const pub = new Redis({ port });
const count = await pub.publish("orders", "o1");
if (count !== 12) fail(`PUBLISH reached ${count}, not 12`);
const deadline = Date.now() + 5000;
while (received < 12 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
if (received !== 12) fail(`received ${received} of 12`);
const numsub = await pub.pubsub("NUMSUB", "orders", "alerts");
if (JSON.stringify(numsub) !== JSON.stringify(["orders", 6, "alerts", 6])) fail(`NUMSUB ${numsub}`);
// Leaving subscriber mode: ordinary commands work again.
await subscribers[0].unsubscribe("orders", "alerts");
await subscribers[0].punsubscribe("ord*");
const pong = await subscribers[0].ping();
if (pong !== "PONG") fail(`PING after unsubscribing: ${pong}`);
if ((await pub.publish("alerts", "a")) !== 5) fail("alerts count after one unsubscribed");
for (const s of subscribers) s.disconnect();
pub.disconnect();
clearTimeout(timer);
console.log("ioredis subscriber mode: ok");
