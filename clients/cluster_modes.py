"""redis-py's RedisCluster and Sentinel against idserver, driven by
systest/clientmodes: connect with default options, INCR, NEXTID, a
pipeline and a transaction, print PHASE1, wait for a line on stdin (the
test has killed the node in use), retry INCR until one succeeds, print
the outage, run the same commands again and print every value as JSON.

usage: cluster_modes.py cluster|sentinel tag host:port ...
"""
import json
import sys
import time

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

mode, tag, addrs = sys.argv[1], sys.argv[2], sys.argv[3:]
hosts = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in addrs]
incrs, ids = [], []

rebuilt = False

if mode == "cluster":
    rc = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in hosts])

    def nextid():
        # NEXTID has no key: redis-py must be told where to send it.
        return int(rc.execute_command("NEXTID", target_nodes=RedisCluster.RANDOM))

    def transaction():
        # redis-py 4.3's cluster pipeline has no MULTI/EXEC: a transaction
        # runs on the connection of the node that owns the key's slot.
        node = rc.get_node_from_key(tag)
        with rc.get_redis_connection(node).pipeline(transaction=True) as p:
            p.incr(tag)
            p.incr(tag)
            return p.execute()

    def pipeline():
        p = rc.pipeline()
        p.incr(tag)
        p.incr(tag)
        return p.execute()

    client = rc
else:
    sentinel = Sentinel(hosts)
    client = sentinel.master_for("mymaster")

    def nextid():
        return int(client.execute_command("NEXTID"))

    def transaction():
        with client.pipeline(transaction=True) as p:
            p.incr(tag)
            p.incr(tag)
            return p.execute()

    def pipeline():
        with client.pipeline(transaction=False) as p:
            p.incr(tag)
            p.incr(tag)
            return p.execute()


def exercise():
    for _ in range(3):
        incrs.append(int(client.incr(tag)))
    for _ in range(3):
        ids.append(nextid())
    incrs.extend(int(v) for v in pipeline())
    incrs.extend(int(v) for v in transaction())


exercise()
print("PHASE1", flush=True)
sys.stdin.readline()
killed = time.monotonic()
deadline = killed + 60
last = None
while True:
    try:
        incrs.append(int(client.incr(tag)))
        break
    except Exception as e:  # the client's own errors while it finds a live node
        last = e
        if mode == "cluster" and "pickle" in str(e):
            # redis-py 4.3's RedisCluster cannot rebuild its map once the
            # first of its startup nodes is dead (it deep-copies connection
            # options holding a lock; fixed in redis-py 4.4): against Redis
            # Cluster too, an application must make a new client.
            rc = client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in hosts])
            rebuilt = True
            continue
        if time.monotonic() > deadline:
            print("FAIL no INCR within 60s of the kill:", repr(last), flush=True)
            sys.exit(1)
        time.sleep(0.005)
outage_ms = int((time.monotonic() - killed) * 1000)
exercise()
print("RESULT " + json.dumps({"outage_ms": outage_ms, "rebuilt": rebuilt, "incr": [str(v) for v in incrs], "nextid": [str(v) for v in ids]}), flush=True)
