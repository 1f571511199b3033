package testproc

import (
	"crypto/tls"
	"io"
	"testing"
)

// TestSelfSignedServesTLS: the certificate serves TLS on 127.0.0.1 to a
// client that trusts only the returned pool, and is refused by one that
// trusts nothing.
func TestSelfSignedServesTLS(t *testing.T) {
	certFile, keyFile, pool := SelfSigned(t, t.TempDir())
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "ok")
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("a client trusting the pool: %v", err)
	}
	if b, err := io.ReadAll(c); err != nil || string(b) != "ok" {
		t.Fatalf("read %q, %v", b, err)
	}
	c.Close()
	if c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{}); err == nil {
		c.Close()
		t.Fatal("a client trusting nothing accepted the certificate")
	}
}
