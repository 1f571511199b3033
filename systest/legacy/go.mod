module idserver/systest/legacy

go 1.26.0

require (
	github.com/bwmarrin/snowflake v0.3.0
	github.com/redis/go-redis/v9 v9.17.3
	github.com/sony/sonyflake/v2 v2.2.0
	idserver v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace idserver => ../..
