// Package clientmodes runs Redis Cluster and Sentinel clients, unchanged
// and with their default options, against real idserver processes on
// 127.0.0.1: go-redis's cluster, universal and failover clients, rueidis,
// redis-py's RedisCluster and Sentinel, and ioredis's Cluster and
// sentinels. Each issues INCR, NEXTID, a pipeline and a transaction on one
// node and on three, then the node it uses is killed with SIGKILL and the
// client must carry on through another node by itself (on one node: the
// same node, restarted), with no value repeated or going back. The tests
// log each client's outage: the time from the kill to its first INCR
// answered.
package clientmodes
