#!/usr/bin/env bash
# Side-by-side: idserver NEXTID and INCR against Debian's redis-server answering INCR,
# both driven by redis-benchmark -c 50 on this machine, in the same run.
# Needs redis-server and redis-tools (apt-get install redis-server redis-tools).
#
#   bench/run.sh            # GOMAXPROCS=1 for idserver, as Redis uses one core
#   PROCS=2 bench/run.sh    # the Go default on a 2-core machine
#   ROUNDS=5 N=500000 bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in redis-server redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install redis-server redis-tools" >&2; exit 2; }
done
ROUNDS=${ROUNDS:-3}
N=${N:-300000}
PROCS=${PROCS:-1}
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/idserver" ./cmd/idserver
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
GOMAXPROCS=$PROCS "$work/idserver" --port 0 --dir "$work/data" 2>"$work/idserver.log" &
pids+=($!)
for _ in $(seq 100); do
  iport=$(grep -o 'msg=listening addr=127.0.0.1:[0-9]*' "$work/idserver.log" | cut -d: -f2 || true)
  [ -n "$iport" ] && redis-cli -p "$rport" PING >/dev/null 2>&1 && break
  sleep 0.1
done
[ -n "$iport" ] || { cat "$work/idserver.log"; exit 1; }

# rps PORT PIPELINE N CMD... prints requests per second.
rps() {
  local port=$1 p=$2 n=$3; shift 3
  redis-benchmark -p "$port" -c 50 -P "$p" -n "$n" -q "$@" 2>&1 | tr '\r' '\n' |
    sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "idserver GOMAXPROCS=$PROCS, redis-benchmark -c 50, median of $ROUNDS rounds"
printf '%-9s %13s %17s %6s %15s %6s\n' pipeline "redis INCR/s" "idserver NEXTID/s" ratio "idserver INCR/s" ratio
for p in 1 32; do
  n=$N; [ "$p" -gt 1 ] && n=$((N * 10))
  r=(); i=(); s=()
  for _ in $(seq "$ROUNDS"); do
    r+=("$(rps "$rport" "$p" "$n" INCR counter)")
    i+=("$(rps "$iport" "$p" "$n" NEXTID)")
    s+=("$(rps "$iport" "$p" "$n" INCR counter)")
  done
  rm=$(printf '%s\n' "${r[@]}" | median); im=$(printf '%s\n' "${i[@]}" | median); sm=$(printf '%s\n' "${s[@]}" | median)
  printf '%-9s %13.0f %17.0f %6.2f %15.0f %6.2f\n' "$p" "$rm" "$im" "$(echo "$im / $rm" | bc -l)" "$sm" "$(echo "$sm / $rm" | bc -l)"
done
# 20 s of batches: the first second may borrow ahead (--max-borrow), later ones wait for the clock.
b=$(rps "$iport" 1 80000 NEXTID 1000)
printf 'NEXTID 1000: %.0f IDs/s (layout ceiling 4096 per ms = 4,096,000/s): %.2f of it\n' \
  "$(echo "$b * 1000" | bc -l)" "$(echo "$b * 1000 / 4096000" | bc -l)"
