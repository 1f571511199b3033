// Package prometheus holds idserver's Prometheus alert rules
// (idserver-rules.yaml) and their promtool tests (idserver-rules_test.yaml,
// whose input series were recorded from a node that lost its quorum), and
// tests that every metric the rules and the Grafana dashboard
// (deploy/grafana/idserver.json) name is one that a live node and
// prometheus-redis-exporter export.
//
// Record the promtool test's input again (three nodes, two killed, the
// survivor scraped) with
//
//	go test -run TestRecordQuorumLoss ./deploy/prometheus/ -record
package prometheus
