// Package deploy runs idserver as deploy/kubernetes runs it: three pods
// started with the StatefulSet's own arguments and environment (read from
// the manifest, the pods' DNS names and ports mapped to 127.0.0.1 and ports
// from testproc.FreePort), their probes polled over HTTP on the paths the
// manifest names, and the restarts Kubernetes makes: every pod at once
// (podManagementPolicy Parallel), and each in turn as a rolling update
// does, each waiting for the one before to be ready. Its tests are in
// *_test.go; they are skipped under -short.
package deploy
