package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// expiryWarning: a certificate with less than this left is warned about at
// start, on each reload and once a day (expiryCheckEvery).
const (
	expiryWarning    = 30 * 24 * time.Hour
	expiryCheckEvery = 24 * time.Hour
)

// nodeCerts is the node's certificate (--tls-cert, --tls-key), read at
// start and again on each SIGHUP, and the CAs the nodes' certificates are
// verified against (--tls-ca, or the certificates of --tls-cert as they
// were at start), read at start only. The TLS configurations take the
// certificate at each handshake (GetCertificate, GetClientCertificate):
// a reload reaches the connections made after it, and the open ones keep
// the certificate they were made with.
type nodeCerts struct {
	certFile, keyFile string
	roots             *x509.CertPool
	now               func() time.Time
	current           atomic.Pointer[tls.Certificate] // Leaf set

	server, client *tls.Config
}

// openCerts reads the node certificate and the CAs; nil without
// --tls-cert. A certificate that has expired or is not valid yet is
// refused, with the file, its dates and the remedy.
func openCerts(certFile, keyFile, caFile string, now func() time.Time) (*nodeCerts, error) {
	if certFile == "" {
		return nil, nil
	}
	cert, err := readCert(certFile, keyFile, now())
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", caFile)
		}
	} else {
		for _, der := range cert.Certificate {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert: %w", err)
			}
			roots.AddCert(c)
		}
	}
	nc := &nodeCerts{certFile: certFile, keyFile: keyFile, roots: roots, now: now}
	nc.current.Store(cert)
	get := func() *tls.Certificate { return nc.current.Load() }
	// Certificates stays empty: with it set, Go would call GetCertificate
	// only for clients that send a server name.
	nc.server = &tls.Config{MinVersion: tls.VersionTLS12, ClientCAs: roots, ClientAuth: tls.VerifyClientCertIfGiven,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return get(), nil }}
	nc.client = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return get(), nil }}
	return nc, nil
}

// readCert loads a key pair and refuses it outside its validity.
func readCert(certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--tls-cert %s: %w", certFile, err)
		}
	}
	leaf := cert.Leaf
	switch {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("--tls-cert %s: the certificate expired %s ago (NotAfter %s): clients and the other nodes would refuse it; "+
			"renew it (or point --tls-cert and --tls-key at a valid pair) and start again",
			certFile, roughly(now.Sub(leaf.NotAfter)), leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("--tls-cert %s: the certificate is not valid until %s (NotBefore), %s from now: clients and the other nodes would refuse it; "+
			"check this machine's clock, or use a certificate valid now",
			certFile, leaf.NotBefore.UTC().Format(time.RFC3339), roughly(leaf.NotBefore.Sub(now)))
	}
	return &cert, nil
}

// reload reads the certificate files again. The new certificate replaces
// the current one only if it is valid now and the CAs the nodes trust
// verify it (else the other nodes would refuse it on the Raft port);
// otherwise the current one stays and the error says why.
func (nc *nodeCerts) reload() (*x509.Certificate, error) {
	now := nc.now()
	cert, err := readCert(nc.certFile, nc.keyFile, now)
	if err != nil {
		return nil, err
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: nc.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("--tls-cert %s: not signed by a CA this node trusts (--tls-ca, or without it the certificate it started with), "+
			"so the other nodes would refuse it: %v; a new CA takes a restart, with --tls-ca listing the old and the new", nc.certFile, err)
	}
	nc.current.Store(cert)
	return cert.Leaf, nil
}

// notAfter is when the certificate in use expires.
func (nc *nodeCerts) notAfter() time.Time { return nc.current.Load().Leaf.NotAfter }

// warnExpiry logs a WARN when the certificate in use has less than
// expiryWarning left.
func (nc *nodeCerts) warnExpiry(log *slog.Logger) {
	leaf := nc.current.Load().Leaf
	if left := leaf.NotAfter.Sub(nc.now()); left < expiryWarning {
		log.Warn("the TLS certificate expires soon: renew it and send SIGHUP", "cert", nc.certFile, "expires_in", roughly(left),
			"not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "serial", leaf.SerialNumber.String())
	}
}

// watchCerts answers SIGHUP (hup) by reloading the certificate, and checks
// its expiry once a day, until stop is closed. Without TLS a SIGHUP is
// logged and does nothing else. It runs from before the node opens, so
// that a SIGHUP at any point of the start never ends the process.
func watchCerts(nc *nodeCerts, log *slog.Logger, hup <-chan os.Signal, stop <-chan struct{}) {
	var daily <-chan time.Time
	if nc != nil {
		t := time.NewTicker(expiryCheckEvery)
		defer t.Stop()
		daily = t.C
	}
	for {
		select {
		case <-stop:
			return
		case <-daily:
			nc.warnExpiry(log)
		case <-hup:
			if nc == nil {
				log.Info("SIGHUP: nothing to reload (no --tls-cert)")
				continue
			}
			leaf, err := nc.reload()
			if err != nil {
				cur := nc.current.Load().Leaf
				log.Error("SIGHUP: TLS certificate not reloaded: keeping the one in use", "err", err,
					"serial", cur.SerialNumber.String(), "not_after", cur.NotAfter.UTC().Format(time.RFC3339))
				continue
			}
			log.Info("SIGHUP: TLS certificate reloaded: new connections get it, open ones keep theirs", "cert", nc.certFile,
				"serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
			nc.warnExpiry(log)
		}
	}
}

// roughly is a duration in days when it is a day or more, else rounded to
// the second.
func roughly(d time.Duration) string {
	if d >= 24*time.Hour {
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	return d.Round(time.Second).String()
}
