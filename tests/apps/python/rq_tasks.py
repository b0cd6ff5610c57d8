"""The functions rq_app.py enqueues; RQ's workers import this module."""
import time

from rq import get_current_job
from rq.job import Job


def square(n):
    return n * n


def flaky(n):
    """Fails on its first two attempts (counted in the server), then succeeds."""
    job = get_current_job()
    attempt = job.connection.incr("rq-app:attempts:%d" % n)
    if attempt < 3:
        raise RuntimeError("flaky %d: attempt %d fails" % (n, attempt))
    return n * n


def boom(n):
    raise ValueError("boom %d" % n)


def slow_square(n):
    time.sleep(0.2)
    return n * n


def plus_one_of(job_id):
    """Runs after the job it depends on: its result plus one."""
    job = get_current_job()
    return Job.fetch(job_id, connection=job.connection).return_value() + 1


def after_failure(job_id):
    """Depends on a failed job with allow_failure: sees its status."""
    job = get_current_job()
    return Job.fetch(job_id, connection=job.connection).get_status().value
