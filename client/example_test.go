package idclient_test

import (
	"context"
	"fmt"
	"log"
	"os"

	idclient "idserver/client"
)

// Example: an ID, an order ID on its buyer's shard, and a counter, from
// the node at IDSERVER_ADDR (the tests start one there; otherwise
// `go run ./cmd/idserver` serves 127.0.0.1:6380).
func Example() {
	addr := os.Getenv("IDSERVER_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6380"
	}
	c, err := idclient.New(idclient.Options{Addrs: []string{addr}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	id, err := c.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	order, err := c.Gene(ctx, "12345")
	if err != nil {
		log.Fatal(err)
	}
	orders := c.Counter("orders")
	n1, _ := orders.Next(ctx)
	n2, _ := orders.Next(ctx)
	fmt.Println(id > 0, order%256 == 12345%256, n2 > n1)
	// Output: true true true
}
