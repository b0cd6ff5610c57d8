"""Client-side caching in RESP2 as redis-py users wire it: a PubSub
connection subscribed to __redis__:invalidate, a tracking connection that
redirects its invalidations there, a cache dropped on each message.
Usage: client_tracking.py PORT"""

import sys
import time

import redis

port = int(sys.argv[1])
admin = redis.Redis(port=port)
admin.flushall()

listener = redis.Redis(port=port, single_connection_client=True)
listener_id = listener.client_id()
pubsub = listener.pubsub()
# PubSub takes its own connection: find its id once it is subscribed.
pubsub.subscribe("__redis__:invalidate")
first = pubsub.get_message(timeout=5)
assert first and first["type"] == "subscribe", first
subscriber_id = next(int(c["id"]) for c in admin.client_list() if c["cmd"] == "subscribe")
assert subscriber_id != listener_id

tracker = redis.Redis(port=port, single_connection_client=True)
tracker.client_tracking_on(clientid=subscriber_id)
assert tracker.client_getredir() == subscriber_id, tracker.client_getredir()

keys = [f"user:{i}" for i in range(12)]
for k in keys:
    admin.set(k, "v1")
cache = {k: tracker.get(k) for k in keys}
assert all(v == b"v1" for v in cache.values())

writer = redis.Redis(port=port)
for k in keys[:6]:
    writer.set(k, "v2")

seen = set()
deadline = time.time() + 10
while len(seen) < 6 and time.time() < deadline:
    msg = pubsub.get_message(timeout=1)
    if not msg:
        continue
    assert msg["type"] == "message" and msg["channel"] == b"__redis__:invalidate", msg
    for key in msg["data"]:
        cache.pop(key.decode(), None)
        seen.add(key.decode())
assert seen == set(keys[:6]), seen
assert set(cache) == set(keys[6:]), cache

# FLUSHALL: one message with a null key list.
writer.flushall()
msg = pubsub.get_message(timeout=5)
assert msg and msg["type"] == "message" and msg["data"] is None, msg

tracker.client_tracking_off()
assert tracker.client_getredir() == -1
print("ok: invalidations for", sorted(seen), "and the flush")
