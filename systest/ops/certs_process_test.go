package ops

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestCertOutsideItsValidityRefused: a certificate that expired five years
// ago, and one valid only from tomorrow, are refused at start (exit 1) with
// the file, the date and the remedy.
func TestCertOutsideItsValidityRefused(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name                string
		notBefore, notAfter time.Time
		want                []string
	}{
		{"expired", now.AddDate(-6, 0, 0), now.AddDate(-5, 0, 0), []string{"the certificate expired", "ago (NotAfter ", "renew it"}},
		{"not yet valid", now.Add(24 * time.Hour), now.Add(48 * time.Hour), []string{"the certificate is not valid until", "(NotBefore)", "clock"}},
	} {
		certFile, keyFile, _ := testproc.SelfSignedWith(t, t.TempDir(), testproc.CertOptions{NotBefore: c.notBefore, NotAfter: c.notAfter})
		// A node that takes the certificate runs on: it is ended after 30 s.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, systest.Binary(t), "--port", systest.FreePort(t), "--dir", t.TempDir(), "--tls-cert", certFile, "--tls-key", keyFile)
		b, _ := cmd.CombinedOutput()
		cancel()
		code, out := cmd.ProcessState.ExitCode(), string(b) // -1: ended after 30 s
		date := c.notAfter
		if c.name != "expired" {
			date = c.notBefore
		}
		want := append(c.want, "--tls-cert "+certFile+":", date.UTC().Format(time.RFC3339))
		for _, w := range want {
			if code != 1 || !strings.Contains(out, w) {
				t.Fatalf("%s certificate: exit %d, want 1 and %q in:\n%s", c.name, code, w, out)
			}
		}
	}
}

// servedSerial is the serial of the certificate a new TLS connection to
// addr gets.
func servedSerial(t *testing.T, addr string, pool *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestSIGHUPReloadsTheCertificate: after SIGHUP a new connection gets the
// new certificate's serial while a connection made before keeps working;
// the expiry metric follows, and a certificate expiring within 30 days is
// warned about. A reload that fails (an expired certificate, one that
// --tls-ca does not trust) keeps the certificate in use and logs why.
func TestSIGHUPReloadsTheCertificate(t *testing.T) {
	// --tls-ca trusts both self-signed certificates: the one the node
	// starts with and the one it takes on SIGHUP.
	first, second, certDir := t.TempDir(), t.TempDir(), t.TempDir()
	firstCert, _, _ := testproc.SelfSignedWith(t, first, testproc.CertOptions{Serial: 1})
	secondCert, _, _ := testproc.SelfSignedWith(t, second, testproc.CertOptions{Serial: 2, NotAfter: time.Now().Add(10 * 24 * time.Hour)})
	bundle := append(readTestFile(t, firstCert), readTestFile(t, secondCert)...)
	caFile := filepath.Join(certDir, "ca.pem")
	writeTestFile(t, caFile, bundle)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	certFile, keyFile := filepath.Join(certDir, "cert.pem"), filepath.Join(certDir, "key.pem")
	install := func(dir string) {
		writeTestFile(t, certFile, readTestFile(t, filepath.Join(dir, "cert.pem")))
		writeTestFile(t, keyFile, readTestFile(t, filepath.Join(dir, "key.pem")))
	}
	install(first)
	maddr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	p, err := systest.LaunchTLS(t, t.TempDir(), pool, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-ca", caFile, "--metrics-addr", maddr)
	if err != nil {
		t.Fatal(err)
	}
	old, err := tls.Dial("tcp", p.Addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldReader := bufio.NewReader(old)
	ping := func() {
		t.Helper()
		old.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := old.Write([]byte("PING\r\n")); err != nil {
			t.Fatalf("PING on the connection made before: %v", err)
		}
		if line, err := oldReader.ReadString('\n'); line != "+PONG\r\n" || err != nil {
			t.Fatalf("PING on the connection made before: %q, %v", line, err)
		}
	}
	ping()
	expiry := func() time.Duration {
		v := systest.MetricValue(t, systest.Scrape(t, "http://"+maddr+"/metrics"), "idserver_tls_cert_expiry_seconds")
		return time.Duration(v * float64(time.Second))
	}
	if d := expiry(); d < 23*time.Hour || d > 24*time.Hour {
		t.Fatalf("idserver_tls_cert_expiry_seconds says %v, the certificate has a day", d)
	}
	hup := func() {
		t.Helper()
		if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	waitLog := func(what string) {
		t.Helper()
		wait.For(t, 10*time.Second, fmt.Sprintf("%q in the log", what), func() (bool, string) { return strings.Contains(p.Log(), what), p.Log() })
	}

	install(second)
	hup()
	wait.For(t, 10*time.Second, "serial 2 on a new connection after SIGHUP", func() (bool, string) {
		serial := servedSerial(t, p.Addr, pool)
		return serial == "2", "serial " + serial + "\n" + p.Log()
	})
	ping()
	if s := old.ConnectionState().PeerCertificates[0].SerialNumber.String(); s != "1" {
		t.Fatalf("the connection made before has serial %s", s)
	}
	waitLog("msg=\"the TLS certificate expires soon: renew it and send SIGHUP\" cert=" + certFile + " expires_in=9d")
	if d := expiry(); d < 9*24*time.Hour || d > 10*24*time.Hour {
		t.Fatalf("idserver_tls_cert_expiry_seconds says %v after the reload, the certificate has 10 days", d)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, TLSConfig: &tls.Config{RootCAs: pool}})
	defer rdb.Close()
	if err := rdb.Do(context.Background(), "NEXTID").Err(); err != nil {
		t.Fatalf("NEXTID over the new certificate: %v", err)
	}

	for i, c := range []struct {
		opts testproc.CertOptions
		why  string
	}{
		{testproc.CertOptions{Serial: 3, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, "the certificate expired"},
		{testproc.CertOptions{Serial: 4}, "not signed by a CA this node trusts"},
	} {
		testproc.SelfSignedWith(t, certDir, c.opts)
		hup()
		waitLog(c.why)
		if n := strings.Count(p.Log(), "TLS certificate not reloaded: keeping the one in use"); n != i+1 {
			t.Fatalf("%d failed reloads logged, want %d:\n%s", n, i+1, p.Log())
		}
		if s := servedSerial(t, p.Addr, pool); s != "2" {
			t.Fatalf("after a failed reload (%s) a new connection gets serial %s, want 2", c.why, s)
		}
		ping()
	}
}

// TestSIGHUPDuringTheStartDoesNotKill: SIGHUPs sent from the first line
// the process logs until it listens leave it running and serving, and
// SIGTERM then ends it with status 0.
func TestSIGHUPDuringTheStartDoesNotKill(t *testing.T) {
	cmd := exec.Command(systest.Binary(t), "--port", systest.FreePort(t), "--dir", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var log testproc.Buffer
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		first := true
		for sc.Scan() {
			log.Write([]byte(sc.Text() + "\n"))
			if first {
				first = false
				go func() { // SIGHUP at once, then every millisecond until it listens
					for {
						cmd.Process.Signal(syscall.SIGHUP)
						select {
						case <-addr:
							return
						case <-time.After(time.Millisecond):
						}
					}
				}()
			}
			if m := strings.SplitN(sc.Text(), "msg=listening addr=", 2); len(m) == 2 {
				addr <- strings.Fields(m[1])[0]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("server log:\n%s", log.String())
		}
	})
	var at string
	select {
	case at = <-addr:
		addr <- at // and stop the SIGHUPs
	case err := <-exited:
		t.Fatalf("the process ended during its start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no listening line within 30s")
	}
	rdb := redis.NewClient(&redis.Options{Addr: at, MaxRetries: -1})
	defer rdb.Close()
	wait.For(t, 10*time.Second, "PONG once listening", func() (bool, string) {
		err := rdb.Ping(context.Background()).Err()
		return err == nil, fmt.Sprint(err)
	})
	before, _, _ := strings.Cut(log.String(), "msg=listening")
	if !strings.Contains(before, "SIGHUP: nothing to reload") {
		t.Fatal("no SIGHUP was logged before the listening line")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20s of SIGTERM")
	}
}

func readTestFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeTestFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
