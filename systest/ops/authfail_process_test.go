package ops

import (
	"bufio"
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"idserver/internal/systest"
	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// TestAuthFailuresCountedLoggedAndExported: five wrong passwords (AUTH and
// HELLO AUTH) on one connection are in INFO stats acl_access_denied_auth,
// in idserver_auth_failures_total and in a WARN line naming the client.
func TestAuthFailuresCountedLoggedAndExported(t *testing.T) {
	maddr := "127.0.0.1:" + strconv.Itoa(testproc.FreePort(t))
	p := systest.StartProc(t, t.TempDir(), "--requirepass", "pw", "--metrics-addr", maddr)
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte(strings.Repeat("*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\n", 4) + "*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$5\r\nwrong\r\n"))
	rd := bufio.NewReader(conn)
	for i := range 5 {
		if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "-WRONGPASS") {
			t.Fatalf("wrong password %d: %q, %v", i+1, line, err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Password: "pw"})
	defer rdb.Close()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil || !strings.Contains(info, "\r\nacl_access_denied_auth:5\r\n") {
		t.Fatalf("INFO stats after 5 wrong passwords: %v\n%s", err, info)
	}
	if v := systest.MetricValue(t, systest.Scrape(t, "http://default:pw@"+maddr+"/metrics"), "idserver_auth_failures_total"); v != 5 {
		t.Fatalf("idserver_auth_failures_total %v, want 5", v)
	}
	client := regexp.QuoteMeta(conn.LocalAddr().String())
	logged := regexp.MustCompile(`level=WARN msg="AUTH refused: wrong password" failures=\d+ last_client=` + client)
	wait.For(t, 20*time.Second, "a WARN line for the wrong passwords of "+conn.LocalAddr().String(), func() (bool, string) {
		return logged.MatchString(p.Log()), p.Log()
	})
}
