package main

import (
	"crypto/tls"
	"strings"
	"testing"

	"idserver/internal/testproc"
)

// TestLoadTLSVerifiesBothWays: the configurations --tls-cert gives a node
// verify the other side. Its client refuses a server whose certificate
// another CA signed; a server requiring certificates (the Raft port's
// ClientAuth) takes its client and refuses a client of another CA.
func TestLoadTLSVerifiesBothWays(t *testing.T) {
	certFile, keyFile, _ := testproc.SelfSigned(t, t.TempDir())
	server, client, err := loadTLS(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey, _ := testproc.SelfSigned(t, t.TempDir())
	otherServer, otherClient, err := loadTLS(otherCert, otherKey, "")
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(srv, cli *tls.Config) (serverErr, clientErr error) {
		srv = srv.Clone()
		srv.ClientAuth = tls.RequireAndVerifyClientCert
		ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		served := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				served <- err
				return
			}
			defer c.Close()
			served <- c.(*tls.Conn).Handshake()
		}()
		c, err := tls.Dial("tcp", ln.Addr().String(), cli)
		if err == nil {
			c.Read(make([]byte, 1)) // TLS 1.3: the server's verdict on the client arrives after the client's handshake
			c.Close()
		}
		return <-served, err
	}
	if serr, cerr := handshake(server, client); serr != nil || cerr != nil {
		t.Fatalf("two nodes with the same certificate: server %v, client %v", serr, cerr)
	}
	if _, cerr := handshake(otherServer, client); cerr == nil || !strings.Contains(cerr.Error(), "unknown authority") {
		t.Fatalf("a node dialing a server of another CA: %v, want unknown authority", cerr)
	}
	stranger := otherClient.Clone() // trusts the node, presents another CA's certificate
	stranger.RootCAs = client.RootCAs
	if serr, _ := handshake(server, stranger); serr == nil || !strings.Contains(serr.Error(), "unknown authority") {
		t.Fatalf("a server requiring certificates, to a client of another CA: %v, want unknown authority", serr)
	}
}
