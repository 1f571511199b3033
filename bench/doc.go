// Package bench measures the idserver Go client (idserver/client) level by
// level against a real idserver process, beside in-process snowflake
// generators (github.com/bwmarrin/snowflake, github.com/sony/sonyflake/v2).
// It is a module of its own so that the peers never enter idserver's
// go.mod. Run: go test -bench . -benchmem -run '^$'
package bench
