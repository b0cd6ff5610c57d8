"""Celery as its users use it, with a Redis broker and a Redis result
backend: a few thousand tasks (delay, a group, a chord, a chain, retries
with a countdown, a failing task) run by a `celery worker` process (prefork,
2 children). Kombu's broker uses lists with BRPOP, MULTI pipelines, sorted
sets and hashes for unacked messages and Pub/Sub for the workers' fanout;
the backend SET/GET, Pub/Sub for results and RPUSH/ZADD for chord parts.
Results and states must come out exact; exits non-zero with the reason
otherwise."""
import os
import subprocess
import sys
import tempfile
import time

port = int(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
os.environ["COREKV_APP_PORT"] = str(port)
sys.path.insert(0, here)

from celery import chain, chord, group  # noqa: E402
from celery.result import ResultSet  # noqa: E402

import celery_tasks as t  # noqa: E402

N = 2000
worker = None


def fail(message):
    print("FAIL: %s" % message)
    if worker is not None:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        log.seek(0)
        print("worker output:\n%s" % log.read())
    sys.exit(1)


t.counters.flushdb()

# 1. The worker: `celery worker`, prefork with two children. Its log goes
# to a file: a pipe nobody reads meanwhile could fill up.
log = tempfile.TemporaryFile(mode="w+")
worker = subprocess.Popen(
    [sys.executable, "-m", "celery", "-A", "celery_tasks", "worker", "-P", "prefork", "-c", "2",
     "-l", "warning", "-n", "apps@%h"],
    cwd=here, env=dict(os.environ, PYTHONPATH=here), stdout=log, stderr=subprocess.STDOUT, text=True)
started = time.time()
deadline = started + 90

# 2. The producer: N tasks with delay, a group, a chord, a chain, retries,
# one failure.
singles = [(n, t.square.delay(n)) for n in range(N)]
grouped = group(t.add.s(n, n) for n in range(200)).apply_async()
chorded = chord(t.square.s(n) for n in range(100))(t.tsum.s())
chained = chain(t.add.s(1, 2), t.add.s(10), t.square.s()).apply_async()
flakies = [(n, t.flaky.delay(n)) for n in range(5)]
doomed = t.boom.delay(13)

# 3. Results: many at once (the backend's native join over GET/MGET), one
# by one (Pub/Sub on the task's channel), and the composites.
results = ResultSet([r for _, r in singles])
try:
    values = results.join_native(timeout=deadline - time.time())
except Exception as error:  # a timeout names how far it came
    fail("joining %d results: %r (%d ready)" % (N, error, results.completed_count()))
if values != [n * n for n in range(N)]:
    fail("squares: %r..." % [v for v, n in zip(values, range(N)) if v != n * n][:5])
if grouped.get(timeout=deadline - time.time()) != [2 * n for n in range(200)]:
    fail("group: %r" % grouped.get())
want = sum(n * n for n in range(100))
if chorded.get(timeout=deadline - time.time()) != want:
    fail("chord: %r, expected %d" % (chorded.get(), want))
if chained.get(timeout=deadline - time.time()) != 169:
    fail("chain: %r" % chained.get())
for n, r in flakies:
    if r.get(timeout=deadline - time.time()) != n * n:
        fail("flaky %d: %r" % (n, r.result))
    if int(t.counters.get("celery-app:attempts:%d" % n)) != 3:
        fail("flaky %d ran %s times" % (n, t.counters.get("celery-app:attempts:%d" % n)))
doomed.get(timeout=deadline - time.time(), propagate=False)
if doomed.state != "FAILURE" or not isinstance(doomed.result, ValueError) or str(doomed.result) != "boom 13":
    fail("the failing task: %s %r" % (doomed.state, doomed.result))
if not all(singles[n][1].state == "SUCCESS" for n in (0, N // 2, N - 1)):
    fail("states: %r" % [singles[n][1].state for n in (0, N // 2, N - 1)])
elapsed = time.time() - started

# 4. The worker answers a broadcast (Pub/Sub fanout, replies on a list),
# then shuts down on one.
replies = t.app.control.ping(timeout=5.0, limit=1)
if len(replies) != 1:
    fail("ping: %r" % replies)
stats = t.app.control.inspect(timeout=5.0, limit=1).stats()
total = sum((s.get("total") or {}).get(name, 0) for s in (stats or {}).values() for name in ("celery_tasks.square",))
if total != N + 100 + 1:
    fail("the worker counts %d square tasks, expected %d" % (total, N + 101))
t.app.control.shutdown()
try:
    worker.wait(timeout=30)
except subprocess.TimeoutExpired:
    fail("the worker ignored its shutdown broadcast")
if worker.returncode != 0:
    fail("the worker exited with %s" % worker.returncode)
# Nothing left on the broker's queue or unacknowledged.
left = (t.counters.llen("celery"), t.counters.zcard("unacked_index"), t.counters.hlen("unacked"))
if left != (0, 0, 0):
    fail("left on the broker (queue, unacked_index, unacked): %r" % (left,))
print("celery: %d tasks (+ a group of 200, a chord of 100, a chain, 5 retried twice, 1 failed) in %.1fs, results exact"
      % (N, elapsed))
