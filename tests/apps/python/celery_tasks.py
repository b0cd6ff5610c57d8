"""The Celery application celery_app.py drives: a Redis broker and a Redis
result backend on the server at $COREKV_APP_PORT. The worker imports it."""
import os

import redis
from celery import Celery

port = int(os.environ["COREKV_APP_PORT"])
url = "redis://127.0.0.1:%d/0" % port
app = Celery("corekv_app", broker=url, backend=url)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=600,
    worker_prefetch_multiplier=8,
    broker_connection_retry_on_startup=True,
    # Chord parts counted in the backend (Redis's RPUSH/LLEN in MULTI, a
    # sorted set when ordered), not polled by a chord_unlock task.
    result_chord_ordered=True,
)
counters = redis.Redis(port=port)


@app.task
def square(n):
    return n * n


@app.task
def add(x, y):
    return x + y


@app.task
def tsum(values):
    return sum(values)


@app.task(bind=True, max_retries=3)
def flaky(self, n):
    """Fails twice (counted in the server), retried after a countdown."""
    attempt = counters.incr("celery-app:attempts:%d" % n)
    if attempt < 3:
        raise self.retry(exc=RuntimeError("flaky %d attempt %d" % (n, attempt)), countdown=0.1)
    return n * n


@app.task
def boom(n):
    raise ValueError("boom %d" % n)
