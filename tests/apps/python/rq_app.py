"""RQ as its users use it: a few thousand jobs enqueued (a pipeline of
enqueue_many, retries, a failing job, dependencies), processed by two `rq
worker` processes (SimpleWorker; one in burst mode, one waiting on BLPOP
until a shutdown command arrives over Pub/Sub). Results (kept in streams),
registries, statuses and counts must come out exact; exits non-zero with
the reason otherwise."""
import os
import subprocess
import sys
import tempfile
import time

import redis
from rq import Queue, Retry
from rq.command import send_shutdown_command
from rq.job import Dependency, Job, JobStatus
from rq.registry import DeferredJobRegistry, FailedJobRegistry, FinishedJobRegistry, StartedJobRegistry
from rq.worker import Worker

port = int(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import rq_tasks  # noqa: E402

N = 2000
DOOMED = 999


def fail(message):
    print("FAIL: %s" % message)
    for w in workers:
        if w.poll() is None:
            w.kill()
            w.wait()
        print("worker output:\n%s" % output_of(w))
    sys.exit(1)


def output_of(worker):
    worker.log.seek(0)
    return worker.log.read()


workers = []
r = redis.Redis(port=port)
r.flushdb()
q = Queue("rq-app", connection=r)

# 1. The producer: enqueue_many in pipelines of 250.
expected = {}  # job id -> (kind, n)
for start in range(0, N, 250):
    datas = []
    for n in range(start, min(start + 250, N)):
        if n == DOOMED:
            datas.append(Queue.prepare_data(rq_tasks.boom, (n,), job_id="doomed"))
        elif n % 100 == 1:
            datas.append(Queue.prepare_data(rq_tasks.flaky, (n,), retry=Retry(max=2)))
        else:
            datas.append(Queue.prepare_data(rq_tasks.square, (n,)))
    with r.pipeline() as pipe:
        jobs = q.enqueue_many(datas, pipeline=pipe)
        pipe.execute()
    for job, data in zip(jobs, datas):
        expected[job.id] = (data.func.__name__, data.args[0])
if len(expected) != N or q.count != N:
    fail("enqueued %d jobs, the queue holds %d, expected %d" % (len(expected), q.count, N))

# 2. Dependencies: on a slow job, on the failing one (deferred for ever),
# and on the failing one with allow_failure.
first = q.enqueue(rq_tasks.slow_square, 7)
second = q.enqueue(rq_tasks.plus_one_of, first.id, depends_on=first)
stuck = q.enqueue(rq_tasks.square, 3, depends_on="doomed")
allowed = q.enqueue(rq_tasks.after_failure, "doomed", depends_on=Dependency(jobs=["doomed"], allow_failure=True))
if second.get_status() != JobStatus.DEFERRED or stuck.get_status() != JobStatus.DEFERRED:
    fail("dependent jobs are %s and %s, not deferred" % (second.get_status(), stuck.get_status()))

# 3. Two worker processes, as `rq worker` runs them.
env = dict(os.environ, PYTHONPATH=here)


def start_worker(name, *extra):
    cmd = [sys.executable, "-m", "rq.cli", "worker", "-u", "redis://127.0.0.1:%d" % port,
           "-w", "rq.worker.SimpleWorker", "-n", name, "-q", *extra, "rq-app"]
    # Its log goes to a file: a pipe nobody reads meanwhile could fill up.
    log = tempfile.TemporaryFile(mode="w+")
    worker = subprocess.Popen(cmd, cwd=here, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    worker.log = log
    return worker


started = time.time()
workers.append(start_worker("burst-worker", "--burst"))
workers.append(start_worker("waiting-worker"))
finished = FinishedJobRegistry(queue=q)
failed = FailedJobRegistry(queue=q)
want_finished = N - 1 + 3  # every job but the doomed one, first, second, allowed
while finished.count != want_finished or failed.count != 1:
    if time.time() - started > 80:
        fail("stuck: %d finished, %d failed, %d queued" % (finished.count, failed.count, q.count))
    for w in workers:
        if w.poll() not in (None, 0):
            fail("a worker exited with %s" % w.returncode)
    time.sleep(0.1)
elapsed = time.time() - started

# The burst worker leaves once the queue is empty; the other on command.
try:
    workers[0].wait(timeout=30)
except subprocess.TimeoutExpired:
    fail("the burst worker did not leave")
send_shutdown_command(r, "waiting-worker")
try:
    workers[1].wait(timeout=30)
except subprocess.TimeoutExpired:
    fail("the waiting worker ignored its shutdown command")
for w in workers:
    if w.returncode != 0:
        fail("a worker exited with %s" % w.returncode)
if Worker.all(connection=r):
    fail("workers still registered: %r" % [w.name for w in Worker.all(connection=r)])

# 4. Every job's status and result.
ids = list(expected)
for job, job_id in zip(Job.fetch_many(ids, connection=r), ids):
    kind, n = expected[job_id]
    if job is None:
        fail("job %s vanished" % job_id)
    status = job.get_status()
    if kind == "boom":
        if status != JobStatus.FAILED:
            fail("the doomed job is %s" % status)
        if "ValueError: boom %d" % n not in (job.latest_result().exc_string or ""):
            fail("the doomed job's exception: %r" % job.latest_result().exc_string)
        continue
    if status != JobStatus.FINISHED:
        fail("%s job %s (%d) is %s" % (kind, job_id, n, status))
    if job.return_value() != n * n:
        fail("%s job %s (%d) returned %r" % (kind, job_id, n, job.return_value()))
    if kind == "flaky":
        attempts = int(r.get("rq-app:attempts:%d" % n))
        if attempts != 3 or job.retries_left != 0:
            fail("flaky job %d: %d attempts, %s retries left" % (n, attempts, job.retries_left))

for job in (first, second, stuck, allowed):
    job.refresh()
if second.return_value() != 50 or second.started_at < first.ended_at:
    fail("the dependent job gave %r, started %s, its dependency ended %s"
         % (second.return_value(), second.started_at, first.ended_at))
if stuck.get_status() != JobStatus.DEFERRED or stuck.id not in DeferredJobRegistry(queue=q).get_job_ids():
    fail("the job depending on a failure is %s" % stuck.get_status())
if allowed.return_value() != "failed":
    fail("the job allowing its dependency's failure gave %r" % allowed.return_value())

# 5. The registries and the queue, exactly.
counts = (q.count, finished.count, failed.count, StartedJobRegistry(queue=q).count, DeferredJobRegistry(queue=q).count)
if counts != (0, want_finished, 1, 0, 1):
    fail("queued, finished, failed, started, deferred: %r" % (counts,))
if failed.get_job_ids() != ["doomed"]:
    fail("failed registry: %r" % failed.get_job_ids())
print("rq: %d jobs processed by 2 workers in %.1fs (%d retried twice, 1 failed, 3 dependencies), counts exact"
      % (N + 3, elapsed, sum(1 for k, _ in expected.values() if k == "flaky")))
