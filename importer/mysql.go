package importer

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// LeafTable names a table shaped like Leaf's leaf_alloc and the columns
// an import reads.
type LeafTable struct {
	Table     string // leaf_alloc
	TagColumn string // biz_tag
	MaxColumn string // max_id: Leaf has handed out values up to it
}

// MySQLSource reads a Leaf segment table from MySQL or MariaDB: each
// row's floor is its max_id, the end of the last segment Leaf handed out.
type MySQLSource struct {
	db    *sql.DB
	name  string
	t     LeafTable
	match string
}

// NewMySQLSource connects to the database url names
// (mysql://user:password@host:port/db) and checks that t's table has its
// columns: a missing one is an error naming it. It selects the rows whose
// tag matches pattern (path.Match; "*" for all).
func NewMySQLSource(ctx context.Context, rawURL string, t LeafTable, pattern string) (*MySQLSource, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", u.Host
	if u.Port() == "" {
		cfg.Addr = u.Host + ":3306"
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" {
		return nil, fmt.Errorf("%s names no database (mysql://user:password@host:port/db)", u.Redacted())
	}
	if pattern == "" {
		pattern = "*"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("--match %q: %w", pattern, err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(1)
	s := &MySQLSource{db: db, t: t, match: pattern,
		name: fmt.Sprintf("mysql %s/%s table %s (tags %q)", cfg.Addr, cfg.DBName, t.Table, pattern)}
	if err := s.checkColumns(ctx, cfg.DBName); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// checkColumns refuses a table that does not exist or lacks a named
// column, naming it and the columns the table has.
func (s *MySQLSource) checkColumns(ctx context.Context, db string) error {
	rows, err := s.db.QueryContext(ctx, `SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?`, s.t.Table)
	if err != nil {
		return err
	}
	defer rows.Close()
	var have []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return err
		}
		have = append(have, c)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(have) == 0 {
		return fmt.Errorf("database %s has no table %s (--table)", db, s.t.Table)
	}
	for _, want := range []struct{ col, flag string }{{s.t.TagColumn, "--tag-column"}, {s.t.MaxColumn, "--max-column"}} {
		if !slices.ContainsFunc(have, func(c string) bool { return strings.EqualFold(c, want.col) }) {
			return fmt.Errorf("table %s has no column %s (%s); its columns are %s", s.t.Table, want.col, want.flag, strings.Join(have, ", "))
		}
	}
	return nil
}

// Name is the server, database, table and pattern.
func (s *MySQLSource) Name() string { return s.name }

// quoteIdent quotes a MySQL identifier.
func quoteIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// Total is the table's row count.
func (s *MySQLSource) Total(ctx context.Context) int64 {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+quoteIdent(s.t.Table)).Scan(&n); err != nil {
		return -1
	}
	return n
}

// Read reads every row's tag and max_id, n rows to a batch; max_id is
// read as text, so that a column of any type is checked as a counter.
func (s *MySQLSource) Read(ctx context.Context, n int, emit func([]Counter) error) error {
	rows, err := s.db.QueryContext(ctx, fmt.Sprintf(`SELECT %s, CAST(%s AS CHAR) FROM %s`,
		quoteIdent(s.t.TagColumn), quoteIdent(s.t.MaxColumn), quoteIdent(s.t.Table)))
	if err != nil {
		return err
	}
	defer rows.Close()
	batch := make([]Counter, 0, n)
	for rows.Next() {
		var tag string
		var raw sql.NullString
		if err := rows.Scan(&tag, &raw); err != nil {
			return err
		}
		if ok, _ := path.Match(s.match, tag); !ok {
			continue
		}
		c := Counter{Key: tag, Refused: fmt.Sprintf("%s is NULL", s.t.MaxColumn)}
		if raw.Valid {
			c.Value, c.Refused = ParseValue(raw.String)
		}
		batch = append(batch, c)
		if len(batch) == n {
			if err := emit(batch); err != nil {
				return err
			}
			batch = make([]Counter, 0, n)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return emit(batch)
	}
	return nil
}

// Close ends the connections.
func (s *MySQLSource) Close() error { return s.db.Close() }
