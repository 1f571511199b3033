"""Times redis-py (Debian's python3-redis) through a server restart:
    python3 restart_probe.py HOST PORT
Prints "ready" once connected; then for each line on stdin ("both" or
"incr"), retries NEXTID (for "both") and then INCR every 5 ms until each
succeeds, printing "nextid MS" and "incr MS" (Unix time in milliseconds).
The client is the one created before the restart: it reconnects by itself.
"""
import sys
import time

import redis

r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]))
r.ping()
print("ready", flush=True)


def first(*cmd):
    while True:
        try:
            r.execute_command(*cmd)
            return time.time() * 1000
        except redis.RedisError:
            time.sleep(0.005)


for line in sys.stdin:
    if line.strip() == "both":
        print("nextid %.1f" % first("NEXTID"), flush=True)
    print("incr %.1f" % first("INCR", "restart"), flush=True)
