// Package testproc starts what the process tests run against, on
// 127.0.0.1 only: the idserver binary built once (Build), idserver
// processes on ports from FreePort that are ready when they answer a
// command (Start, Launch), Debian's redis-server as a peer (StartRedis),
// free ports (FreePort), a self-signed certificate for TLS (SelfSigned;
// SelfSignedWith for its serial and validity), and the skips: Long under
// -short, Need and its kin for a program this machine lacks, each naming
// the line that installs it.
//
// A process is stopped by its handle, never by name: Kill sends SIGKILL (a
// crash), Stop SIGTERM (a clean exit). Start stops what it started when the
// test ends and prints the server's log when the test failed.
//
// It is used by the real-process packages under systest (through
// internal/systest), by the tests of client, chaos and upgrade, and by bench (a
// module of its own, whose import path idserver/bench lies below idserver,
// so Go lets it import this internal package). The fault campaign (chaos)
// keeps its own process manager: its processes outlive a test, run as
// other users and write their logs to files.
package testproc
