// BullMQ (v5) as its users use it, against the server on the port given as
// argv[2]: a Queue producer adds a few thousand jobs (plain, delayed,
// prioritized, failing then retried with backoff, one failing for good), a
// FlowProducer adds parent/child flows, two Workers with concurrency > 1
// process everything while QueueEvents listens on the events stream; then
// one worker runs prioritized jobs in their exact order, another long jobs
// whose locks it renews. BullMQ
// runs on Lua scripts over many keys of one queue (on several shards of
// corekv), blocking BZPOPMIN on its marker key, XADD/XREAD BLOCK for
// events and MULTI for its bookkeeping. Every return value, attempt count,
// the flows' order and the final job counts must come out exact; exits
// non-zero with the reason otherwise.
import { FlowProducer, Queue, QueueEvents, Worker } from "bullmq";

const port = Number(process.argv[2]);
const connection = { host: "127.0.0.1", port, maxRetriesPerRequest: null };
const QUEUE = "corekv-bullmq";
const JOBS = 2000;
const FLOWS = 10;
const CHILDREN = 3;
const PRIORITIES = 5;

function fail(message) {
  console.log(`FAIL: ${message}`);
  process.exit(1);
}
const timer = setTimeout(() => fail("timed out after 90 s"), 90000);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// What each job is: plain, delayed (every 10th), prioritized (every 7th),
// failing twice before succeeding (every 50th), failing for good (one).
function kind(n) {
  if (n === 777) return "doomed";
  if (n % 50 === 0) return "flaky";
  if (n % 10 === 0) return "delayed";
  if (n % 7 === 0) return "prioritized";
  return "plain";
}
const priorityOf = (n) => 1 + (n % PRIORITIES);

const queue = new Queue(QUEUE, { connection, streams: { events: { maxLen: 100000 } } });
await queue.obliterate({ force: true });

// QueueEvents first, so it sees every event from the start.
const events = new QueueEvents(QUEUE, { connection });
await events.waitUntilReady();
let completedEvents = 0;
let failedEvents = 0;
events.on("completed", () => completedEvents++);
events.on("failed", () => failedEvents++);

// 1. The producer: addBulk in chunks, as a web tier would.
const expected = new Map(); // job id -> { n, kind }
const added = [];
for (let start = 0; start < JOBS; start += 250) {
  const batch = [];
  for (let n = start; n < Math.min(start + 250, JOBS); n++) {
    const k = kind(n);
    const opts = {};
    if (k === "delayed") opts.delay = 100 + (n % 5) * 50;
    if (k === "prioritized") opts.priority = priorityOf(n);
    if (k === "flaky") Object.assign(opts, { attempts: 3, backoff: { type: "fixed", delay: 30 } });
    if (k === "doomed") Object.assign(opts, { attempts: 2, backoff: { type: "exponential", delay: 20 } });
    batch.push({ name: "square", data: { n, kind: k }, opts });
  }
  for (const job of await queue.addBulk(batch)) {
    expected.set(job.id, job.data);
    added.push(job);
  }
}
if (expected.size !== JOBS) fail(`addBulk gave ${expected.size} distinct ids for ${JOBS} jobs`);

// 2. Flows: a parent that sums its children's results once they are done.
const flowProducer = new FlowProducer({ connection });
const flows = [];
for (let f = 0; f < FLOWS; f++) {
  const children = Array.from({ length: CHILDREN }, (_, c) => ({
    name: "square",
    queueName: QUEUE,
    data: { n: 10000 + f * 10 + c, kind: "child" },
  }));
  flows.push(await flowProducer.add({ name: "sum", queueName: QUEUE, data: { kind: "parent", f }, children }));
}

// 3. Workers: two of them (each with its own connections), concurrency 8.
const order = []; // job ids in the order their processing started
const returned = new Map(); // job id -> its place in `order` when it returned
async function processor(job) {
  order.push(job.id);
  const { n, kind: k } = job.data;
  if (k === "parent") {
    const values = await job.getChildrenValues();
    return Object.values(values).reduce((a, b) => a + b, 0);
  }
  returned.set(job.id, order.length);
  if (k === "doomed") throw new Error(`job ${n} always fails`);
  if (k === "flaky" && job.attemptsMade < 2) throw new Error(`job ${n} fails on attempt ${job.attemptsMade + 1}`);
  if (n % 100 === 3) await job.updateProgress(50);
  return n * n;
}
let workerErrors = [];
let failedAttempts = 0;
const workers = [0, 1].map(() => {
  const worker = new Worker(QUEUE, processor, { connection, concurrency: 8 });
  worker.on("error", (error) => workerErrors.push(error));
  worker.on("failed", () => failedAttempts++);
  return worker;
});

// 4. Wait for the end: every job and flow node completed, one failed.
const began = Date.now();
const total = JOBS + FLOWS * (CHILDREN + 1);
const deadline = Date.now() + 80000;
for (;;) {
  const counts = await queue.getJobCounts("completed", "failed");
  if (counts.completed === total - 1 && counts.failed === 1) break;
  if (workerErrors.length) fail(`worker error: ${workerErrors[0]}`);
  if (Date.now() > deadline) fail(`stuck at ${JSON.stringify(await queue.getJobCounts())}`);
  await sleep(100);
}
// The last events may still be in flight on the QueueEvents connection.
for (let i = 0; i < 50 && (completedEvents < total - 1 || failedEvents < 1); i++) await sleep(100);
await Promise.all(workers.map((w) => w.close()));
const elapsed = (Date.now() - began) / 1000;

// 5. Checks: every job's result and attempts.
const byKind = {};
for (const [id, data] of expected) {
  const job = await queue.getJob(id);
  if (!job) fail(`job ${id} vanished`);
  byKind[data.kind] = (byKind[data.kind] ?? 0) + 1;
  if (data.kind === "doomed") {
    if (!job.failedReason?.includes("always fails")) fail(`doomed job ${id}: failedReason ${job.failedReason}`);
    if (job.attemptsMade !== 2) fail(`doomed job ${id}: ${job.attemptsMade} attempts, expected 2`);
    if ((await job.getState()) !== "failed") fail(`doomed job ${id} is ${await job.getState()}`);
    continue;
  }
  if (job.returnvalue !== data.n * data.n) fail(`job ${id} (${data.kind} ${data.n}) returned ${job.returnvalue}`);
  const attempts = data.kind === "flaky" ? 3 : 1;
  if (job.attemptsMade !== attempts) fail(`job ${id} (${data.kind}): ${job.attemptsMade} attempts, expected ${attempts}`);
  if (data.kind === "flaky" && job.stacktrace.length !== 2) fail(`flaky job ${id}: ${job.stacktrace.length} stack traces`);
  if (data.kind === "delayed" && job.processedOn < job.timestamp + job.opts.delay)
    fail(`delayed job ${id} ran ${job.processedOn - job.timestamp} ms after it was added, before its ${job.opts.delay} ms delay`);
  if (data.n % 100 === 3 && job.progress !== 50) fail(`job ${id}: progress ${job.progress}`);
}

const started = new Map(order.map((id, i) => [id, i]));

// Flows: each parent ran after all its children and summed their results.
for (const flow of flows) {
  const parent = await queue.getJob(flow.job.id);
  let sum = 0;
  for (const child of flow.children) {
    const c = await queue.getJob(child.job.id);
    if (c.returnvalue !== c.data.n * c.data.n) fail(`flow child ${c.id} returned ${c.returnvalue}`);
    // (Timestamps could not say it: a worker stamps its moveToActive
    // before the server runs it, maybe before the last child finished.)
    if (!(started.get(parent.id) >= returned.get(c.id)))
      fail(`flow parent ${parent.id} started before child ${c.id} finished`);
    sum += c.returnvalue;
  }
  if (parent.returnvalue !== sum) fail(`flow parent ${parent.id} returned ${parent.returnvalue}, children sum ${sum}`);
  const deps = await parent.getDependenciesCount();
  if (deps.processed !== CHILDREN || deps.unprocessed !== 0) fail(`flow parent ${parent.id} dependencies ${JSON.stringify(deps)}`);
}

// The queue's final state, exactly.
const counts = await queue.getJobCounts(
  "completed",
  "failed",
  "active",
  "wait",
  "delayed",
  "prioritized",
  "waiting-children",
  "paused",
);
const want = { completed: total - 1, failed: 1, active: 0, wait: 0, delayed: 0, prioritized: 0, "waiting-children": 0, paused: 0 };
if (JSON.stringify(counts) !== JSON.stringify(want)) fail(`job counts ${JSON.stringify(counts)}, expected ${JSON.stringify(want)}`);
// QueueEvents saw each completion and the one final failure; the workers
// each failed attempt (flaky: 2 each, doomed: 2).
if (completedEvents !== total - 1) fail(`QueueEvents saw ${completedEvents} completions, expected ${total - 1}`);
if (failedEvents !== 1) fail(`QueueEvents saw ${failedEvents} failures, expected 1`);
if (failedAttempts !== 2 * byKind.flaky + 2) fail(`workers saw ${failedAttempts} failed attempts, expected ${2 * byKind.flaky + 2}`);
// Priorities, exactly: with one worker of concurrency 1 (in the run above
// its many in-flight fetches may start in any order), jobs run by priority,
// first in first out within one.
const prioQueue = new Queue(`${QUEUE}-prio`, { connection });
await prioQueue.obliterate({ force: true });
await prioQueue.addBulk(
  Array.from({ length: 100 }, (_, i) => ({ name: "p", data: { i }, opts: { priority: 1 + ((i * 7) % PRIORITIES) } })),
);
const ran = [];
const prioWorker = new Worker(`${QUEUE}-prio`, async (job) => ran.push(job.data.i), { connection, concurrency: 1 });
while ((await prioQueue.getCompletedCount()) < 100) {
  if (Date.now() > deadline) fail(`priorities stuck at ${JSON.stringify(await prioQueue.getJobCounts())}`);
  await sleep(50);
}
await prioWorker.close();
const byPriority = Array.from({ length: 100 }, (_, i) => i).sort(
  (a, b) => ((a * 7) % PRIORITIES) - ((b * 7) % PRIORITIES) || a - b,
);
if (JSON.stringify(ran) !== JSON.stringify(byPriority)) fail(`prioritized jobs ran in the order ${ran}`);

// Long jobs: their worker renews their locks (extendLocks, a script over
// lock keys it builds from job ids) while they run past lockDuration.
const longQueue = new Queue(`${QUEUE}-long`, { connection });
await longQueue.obliterate({ force: true });
await longQueue.addBulk(Array.from({ length: 6 }, (_, i) => ({ name: "long", data: { i } })));
const longErrors = [];
const longWorker = new Worker(
  `${QUEUE}-long`,
  async (job) => {
    await sleep(2500);
    return job.data.i;
  },
  { connection, concurrency: 6, lockDuration: 1000 },
);
longWorker.on("error", (error) => longErrors.push(error));
longWorker.on("stalled", (id) => longErrors.push(`job ${id} stalled`));
while ((await longQueue.getCompletedCount()) < 6) {
  if (longErrors.length) fail(`long jobs: ${longErrors[0]}`);
  if (Date.now() > deadline) fail(`long jobs stuck at ${JSON.stringify(await longQueue.getJobCounts())}`);
  await sleep(100);
}
await longWorker.close();
if (longErrors.length) fail(`long jobs: ${longErrors[0]}`);
const longJobs = await longQueue.getJobs(["completed"]);
if (longJobs.map((j) => j.returnvalue).sort().join() !== "0,1,2,3,4,5") fail("long jobs' results");

// A job added now and awaited through QueueEvents.
const worker = new Worker(QUEUE, processor, { connection, concurrency: 2 });
const last = await queue.add("square", { n: 12, kind: "plain" });
const result = await last.waitUntilFinished(events, 10000);
if (result !== 144) fail(`waitUntilFinished gave ${result}`);
await worker.close();
if (workerErrors.length) fail(`worker error: ${workerErrors[0]}`);

console.log(
  `bullmq: ${total} jobs (${JSON.stringify(byKind)}, ${FLOWS} flows of ${CHILDREN} children), ` +
    `processed in ${elapsed.toFixed(1)}s, ${completedEvents} completed events, ${failedAttempts} failed attempts, counts exact; 100 prioritized jobs in order; 6 long jobs' locks renewed`,
);
await Promise.all([events.close(), flowProducer.close(), queue.close(), prioQueue.close(), longQueue.close()]);
clearTimeout(timer);
process.exit(0);
