"""redis-py used as its users use it, against the server on the port given
as argv[1]: `Lock` (Lua through register_script) contended by many
threads, and `pipeline(transaction=True)` / `Redis.transaction` with a WATCH
retry loop under contention. Counts and lock ownership must come out exact;
exits non-zero with the reason otherwise."""

import sys
import threading
import time

import redis
from redis.exceptions import LockError, LockNotOwnedError, WatchError

PORT = int(sys.argv[1])
THREADS = 12


def client():
    return redis.Redis(host="127.0.0.1", port=PORT, decode_responses=True)


class Failure(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Failure(what)


def run_threads(target, count=THREADS):
    errors = []

    def guarded(i):
        try:
            target(i)
        except Exception as e:  # a thread's failure fails the script
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, "; ".join(errors[:3]))


def lock_contention(r):
    """Threads take one Lock in turn and do a read-modify-write that is only
    right under mutual exclusion; ownership is checked inside and out."""
    rounds = 25
    # Keys on different shards of a 3-shard corekv: the lock, the counter,
    # and the holder's name.
    name, counter, holder = "lock:app", "lock:counter", "lock:holder"
    r.delete(name, counter, holder)
    inside = []
    overlaps = []

    def worker(i):
        for n in range(rounds):
            lock = r.lock(name, timeout=10, sleep=0.001, blocking_timeout=10, thread_local=True)
            check(lock.acquire(), f"thread {i} could not acquire the lock")
            try:
                inside.append(i)
                if len(inside) != 1:
                    overlaps.append(list(inside))
                check(lock.owned(), "an acquired lock is not owned")
                check(lock.locked(), "an acquired lock is not locked")
                r.set(holder, f"{i}:{n}")
                value = int(r.get(counter) or 0)
                time.sleep(0.0005)  # widen the window a broken lock would show
                r.set(counter, value + 1)
                check(r.get(holder) == f"{i}:{n}", "someone else wrote the holder key")
                if n % 5 == 0:
                    check(lock.extend(5), "extend of an owned lock failed")
                    check(lock.reacquire(), "reacquire of an owned lock failed")
                inside.remove(i)
            finally:
                lock.release()
            check(not lock.owned(), "a released lock is still owned")

    run_threads(worker)
    total = int(r.get(counter))
    print(f"lock: {total} increments under the lock, {len(overlaps)} overlaps", flush=True)
    check(not overlaps, f"critical sections overlapped: {overlaps[:3]}")
    check(total == THREADS * rounds, f"counter {total}, expected {THREADS * rounds}")
    check(r.exists(name) == 0, "the lock key outlived every release")

    # Ownership: another token cannot release or extend, an expired lock
    # cannot be extended, and a non-blocking acquire of a held lock fails.
    mine = r.lock(name, timeout=10)
    check(mine.acquire(blocking=False), "free lock not acquired")
    theirs = r.lock(name, timeout=10)
    check(not theirs.acquire(blocking=False), "a held lock was granted twice")
    for attempt in (theirs.release, lambda: theirs.extend(5), theirs.reacquire):
        theirs.local.token = "not-the-owner"  # release() forgets the token
        try:
            attempt()
            check(False, "a stranger's token released, extended or reacquired the lock")
        except LockNotOwnedError:
            pass
    check(mine.owned(), "the owner lost the lock to a stranger")
    mine.release()
    short = r.lock(name, timeout=0.05)
    check(short.acquire(), "short lock not acquired")
    time.sleep(0.2)
    check(not short.owned(), "an expired lock is still owned")
    try:
        short.extend(5)
        check(False, "an expired lock was extended")
    except LockNotOwnedError:
        pass
    try:
        short.release()
        check(False, "an expired lock was released")
    except LockError:
        pass
    print("lock: ownership checks passed", flush=True)


def watch_retry_loop(r):
    """The classic optimistic transaction: WATCH two keys (on different
    shards), read them, MULTI, write both, EXEC; retry on WatchError."""
    increments = 30
    a, b = "tx:a", "tx:b"
    r.delete(a, b)
    retries = [0] * THREADS

    def worker(i):
        for _ in range(increments):
            with r.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        pipe.watch(a, b)
                        x, y = int(pipe.get(a) or 0), int(pipe.get(b) or 0)
                        pipe.multi()
                        pipe.set(a, x + 1)
                        pipe.set(b, y + 1)
                        pipe.get(a)
                        result = pipe.execute()
                        check(result == [True, True, str(x + 1)], f"EXEC answered {result}")
                        # Reads between WATCH and a successful EXEC saw no
                        # other write, so they saw both keys equal.
                        check(x == y, f"EXEC ran after reads that disagree: {x} != {y}")
                        break
                    except WatchError:
                        retries[i] += 1

    run_threads(worker)
    final = (int(r.get(a)), int(r.get(b)))
    print(f"watch: {final} after {THREADS}x{increments} increments, {sum(retries)} WatchError retries", flush=True)
    check(final == (THREADS * increments,) * 2, f"final {final}, expected {THREADS * increments} each")

    # The same through the convenience wrapper, Redis.transaction.
    c = "tx:c"
    r.delete(c)
    increments = 20

    def increment(pipe):
        value = int(pipe.get(c) or 0)
        pipe.multi()
        pipe.set(c, value + 1)

    run_threads(lambda i: [r.transaction(increment, c) for _ in range(increments)])
    final = int(r.get(c))
    print(f"transaction(): {final} after {THREADS}x{increments}", flush=True)
    check(final == THREADS * increments, f"transaction() final {final}, expected {THREADS * increments}")

    # A transaction that is not watched, with a runtime error in the middle:
    # the others still apply and execute raises (raise_on_error) or returns it.
    r.delete(a, b)
    r.rpush(b, "x")
    with r.pipeline(transaction=True) as pipe:
        result = pipe.set(a, 1).incr(b).incr(a).execute(raise_on_error=False)
    check(result[0] is True and isinstance(result[1], redis.ResponseError) and result[2] == 2, f"EXEC with an error: {result}")


def main():
    r = client()
    try:
        check(r.ping(), "PING")
        lock_contention(r)
        watch_retry_loop(r)
    except Failure as failure:
        print(f"FAIL: {failure}", flush=True)
        sys.exit(1)
    print("python: all passed", flush=True)


if __name__ == "__main__":
    main()
