package importer

import (
	"context"
	"database/sql"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"idserver/internal/testproc"
	"idserver/internal/wait"
)

// need returns the path of program, found on PATH or in dirs (globs):
// missing, it skips the test with the line that installs it, or fails it
// under CI, which has installed it.
func need(t *testing.T, program, install string, dirs ...string) string {
	t.Helper()
	if path, err := exec.LookPath(program); err == nil {
		return path
	}
	for _, pattern := range dirs {
		found, _ := filepath.Glob(filepath.Join(pattern, program))
		sort.Strings(found)
		if len(found) > 0 {
			return found[len(found)-1]
		}
	}
	msg := program + " not found: " + install
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI installs it)")
	}
	t.Skip(msg)
	return ""
}

// oldRedis is a redis-server the test starts, kills and starts again on
// the same port and directory (its dump.rdb).
type oldRedis struct {
	t        *testing.T
	bin, dir string
	port     string
	cmd      *exec.Cmd
}

func startOldRedis(t *testing.T) *oldRedis {
	t.Helper()
	r := &oldRedis{t: t, bin: need(t, "redis-server", "apt-get install redis-server"), dir: t.TempDir(),
		port: strconv.Itoa(testproc.FreePort(t))}
	t.Cleanup(func() {
		if r.cmd != nil {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
	})
	r.start()
	return r
}

func (r *oldRedis) addr() string { return "127.0.0.1:" + r.port }

func (r *oldRedis) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin, "--bind", "127.0.0.1", "--port", r.port, "--dir", r.dir, "--save", "", "--appendonly", "no")
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	wait.For(r.t, 10*time.Second, "redis-server listens", func() (bool, string) { return dials(r.addr()), "" })
}

// kill ends redis-server with SIGKILL.
func (r *oldRedis) kill() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}

func dials(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// asUser makes cmd run as name when the test runs as root (PostgreSQL
// refuses to run as root), and returns the uid and gid it runs as.
func asUser(t *testing.T, cmd *exec.Cmd, name string) (uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		return os.Getuid(), os.Getgid()
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("PostgreSQL does not run as root and there is no user %s: apt-get install postgresql creates it (%v)", name, err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return uid, gid
}

// startPostgres runs Debian's PostgreSQL (initdb, then postgres on a free
// port, trusting local connections) for the length of the test and
// returns a URL of its database postgres.
func startPostgres(t *testing.T) string {
	t.Helper()
	dirs := []string{"/usr/lib/postgresql/*/bin"}
	initdb := need(t, "initdb", "apt-get install postgresql", dirs...)
	server := need(t, "postgres", "apt-get install postgresql", dirs...)
	// Not t.TempDir: its parent is closed to the postgres user.
	dir, err := os.MkdirTemp("", "idserver-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	init := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync")
	uid, gid := asUser(t, init, "postgres")
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if out, err := init.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := strconv.Itoa(testproc.FreePort(t))
	cmd := exec.Command(server, "-D", data, "-p", port, "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	asUser(t, cmd, "postgres")
	testproc.StartLogged(t, cmd, "postgres output")
	url := "postgres://postgres@127.0.0.1:" + port + "/postgres"
	wait.For(t, 30*time.Second, "postgres accepts connections", func() (bool, string) {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			return false, err.Error()
		}
		c.Close(context.Background())
		return true, ""
	})
	return url
}

// startMariaDB runs Debian's MariaDB (mariadb-install-db, then mariadbd on
// a free port, without grant tables) for the length of the test and
// returns the address it listens on.
func startMariaDB(t *testing.T) string {
	t.Helper()
	install := need(t, "mariadb-install-db", "apt-get install mariadb-server")
	server := need(t, "mariadbd", "apt-get install mariadb-server", "/usr/sbin")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	args := []string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	port := strconv.Itoa(testproc.FreePort(t))
	args = []string{"--no-defaults", "--datadir=" + data, "--port=" + port, "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(dir, "mysqld.sock"), "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--skip-grant-tables", "--innodb-buffer-pool-size=16M", "--innodb-flush-log-at-trx-commit=0"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	testproc.StartLogged(t, exec.Command(server, args...), "mariadbd output")
	addr := "127.0.0.1:" + port
	wait.For(t, 60*time.Second, "mariadbd accepts connections", func() (bool, string) {
		db := openMySQL(t, addr, "")
		defer db.Close()
		if err := db.Ping(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return addr
}

// openMySQL opens database db (none when "") at addr as root.
func openMySQL(t *testing.T, addr, db string) *sql.DB {
	t.Helper()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", addr, db
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sql.OpenDB(c)
}
