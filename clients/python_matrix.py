"""Drives idserver with redis-py (Debian's python3-redis):
    python3 python_matrix.py HOST PORT [PASSWORD]
Prints one "PASS ..." line per cell; exits non-zero on the first failure.
redis-py 4.3 (Debian 12) speaks RESP2 only; RESP3 came in redis-py 5.
"""
import sys

import redis

host, port = sys.argv[1], int(sys.argv[2])
password = sys.argv[3] if len(sys.argv) > 3 else None

r = redis.Redis(host=host, port=port, password=password)
assert r.ping()
i = int(r.execute_command("NEXTID"))
assert i > 0, i
ids = r.execute_command("NEXTID", 3)
assert len(ids) == 3 and ids[0] < ids[1] < ids[2], ids
g = int(r.execute_command("GENEID", 12345))
assert g % 16 == 12345 % 16, g
d = r.execute_command("DECODE", g)
dec = dict(zip(d[0::2], d[1::2]))
assert int(dec[b"gene"]) == 12345 % 256, dec
first, last = r.execute_command("NEXTSEG", "py-tag", 10)
assert last - first == 9
a = r.incr("py-tag")
b = r.incr("py-tag")
assert b > a > last, (a, b, last)
assert int(r.get("py-tag")) >= b
assert "redis_version" in r.info()
try:
    r.decr("py-tag")
    raise AssertionError("DECR was accepted")
except redis.ResponseError as e:
    assert "never go back" in str(e), e
# pipeline() is a transaction by default: MULTI, the commands, EXEC.
pipe = r.pipeline()
pipe.incr("py-tx")
pipe.incrby("py-tx", 5)
pipe.set("py-seed", 1000000, nx=True)
pipe.get("py-seed")
assert pipe.execute() == [1, 6, True, b"1000000"]
# A discarded transaction leaves no trace.
pipe = r.pipeline()
pipe.multi()
pipe.incr("py-tx")
pipe.reset()
assert r.incr("py-tx") == 7
# Seed the counter if absent: the second SET NX and SETNX do nothing.
assert r.set("py-seed", 5, nx=True) is None
assert r.setnx("py-seed", 5) is False
assert r.incr("py-seed") == 1000001
info = r.info()
assert info["role"] == "master" and info["arch_bits"] in (32, 64), info
print("PASS redis-py RESP2" + (" with password" if password else ""))
