"""redis-py's PubSub as its users use it: channels and patterns over several
connections (spread over the server's cores), get_message, RESP2 and
RESP3 (protocol=3). Exits non-zero with the reason when a count is off."""
import sys
import time

import redis

port = int(sys.argv[1])


def wait_message(p, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = p.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if m is not None:
            return m
    raise SystemExit("no message within %.1fs" % timeout)


def check(protocol):
    r = redis.Redis(port=port, protocol=protocol)
    subs = []
    for i in range(8):
        p = r.pubsub()
        p.subscribe("news", "sport")
        p.psubscribe("n*")
        # The three confirmations.
        for _ in range(3):
            m = None
            deadline = time.time() + 5
            while m is None and time.time() < deadline:
                m = p.get_message(timeout=0.2)
            if m is None or m["type"] not in ("subscribe", "psubscribe"):
                raise SystemExit("confirmation: %r" % (m,))
        subs.append(p)
    n = r.publish("news", "hello")
    if n != 16:
        raise SystemExit("PUBLISH news reached %d, not 16" % n)
    for p in subs:
        got = sorted((m["type"], m["channel"], m["data"], m.get("pattern")) for m in (wait_message(p), wait_message(p)))
        want = sorted([("message", b"news", b"hello", None), ("pmessage", b"news", b"hello", b"n*")])
        if got != want:
            raise SystemExit("protocol %d: got %r" % (protocol, got))
    numsub = r.pubsub_numsub("news", "sport", "none")
    if numsub != [(b"news", 8), (b"sport", 8), (b"none", 0)]:
        raise SystemExit("NUMSUB %r" % (numsub,))
    if r.pubsub_numpat() != 1:
        raise SystemExit("NUMPAT %r" % r.pubsub_numpat())
    if sorted(r.pubsub_channels()) != [b"news", b"sport"]:
        raise SystemExit("CHANNELS %r" % r.pubsub_channels())
    # Unsubscribing half: counts follow on every core.
    for p in subs[:4]:
        p.unsubscribe("sport")
        p.punsubscribe()
        for _ in range(2):
            m = None
            deadline = time.time() + 5
            while m is None and time.time() < deadline:
                m = p.get_message(timeout=0.2)
    time.sleep(0.2)
    n = r.publish("sport", "x")
    if n != 4:
        raise SystemExit("PUBLISH sport reached %d, not 4" % n)
    for p in subs:
        p.close()
    time.sleep(0.3)
    if r.publish("news", "gone") != 0:
        raise SystemExit("closed subscribers still counted")
    # A sharded channel.
    p = r.pubsub()
    p.ssubscribe("{s}1")
    m = None
    deadline = time.time() + 5
    while m is None and time.time() < deadline:
        m = p.get_sharded_message(timeout=0.2)
    if r.spublish("{s}1", "sm") != 1:
        raise SystemExit("SPUBLISH did not reach its subscriber")
    m = None
    deadline = time.time() + 5
    while m is None and time.time() < deadline:
        m = p.get_sharded_message(ignore_subscribe_messages=True, timeout=0.2)
    if m is None or m["type"] != "smessage" or m["data"] != b"sm":
        raise SystemExit("smessage: %r" % (m,))
    p.close()
    print("protocol %d: ok" % protocol)


check(2)
check(3)
