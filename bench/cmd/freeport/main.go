// Command freeport prints a TCP port free on 127.0.0.1, below the kernel's
// ephemeral range, whose port 10000 above is free too (testproc.FreePort's
// draw), for bench/run and bench/floors. With -given FILE it hands out no
// port the file lists, and adds the one it prints (and the one 10000 above
// it) to the file: a script that asks for several ports before it starts
// anything on them gets each once.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"idserver/internal/testproc"
)

func main() {
	given := flag.String("given", "", "a file of the ports handed out so far, one per line")
	flag.Parse()
	var ports []int
	if *given != "" {
		b, err := os.ReadFile(*given)
		if err != nil && !os.IsNotExist(err) {
			fmt.Fprintln(os.Stderr, "freeport:", err)
			os.Exit(1)
		}
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				ports = append(ports, p)
			}
		}
	}
	port, err := testproc.Port(ports)
	if err != nil {
		fmt.Fprintln(os.Stderr, "freeport:", err)
		os.Exit(1)
	}
	if *given != "" {
		f, err := os.OpenFile(*given, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = fmt.Fprintf(f, "%d\n%d\n", port, port+10000)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "freeport:", err)
			os.Exit(1)
		}
	}
	fmt.Println(port)
}
