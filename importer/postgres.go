package importer

import (
	"context"
	"fmt"
	"math/big"
	"path"

	"github.com/jackc/pgx/v5"
)

// PostgresSource reads PostgreSQL sequences: each one's floor is the
// highest value any session may have handed out or cached.
type PostgresSource struct {
	conn  *pgx.Conn
	name  string
	match string
}

// NewPostgresSource connects to the database url names
// (postgres://user:password@host:port/db) and selects the sequences whose
// tag matches pattern (path.Match; "*" for all). A sequence's tag is its
// name, qualified by its schema outside public ("billing.invoice_seq").
func NewPostgresSource(ctx context.Context, url, pattern string) (*PostgresSource, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if pattern == "" {
		pattern = "*"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("--match %q: %w", pattern, err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &PostgresSource{conn: conn, name: fmt.Sprintf("postgres %s:%d/%s (sequences %q)", cfg.Host, cfg.Port, cfg.Database, pattern), match: pattern}, nil
}

// Name is the server, database and pattern.
func (s *PostgresSource) Name() string { return s.name }

// sequence is one row of pg_sequences.
type sequence struct {
	schema, name     string
	increment, cache int64
}

func (q sequence) tag() string {
	if q.schema == "public" {
		return q.name
	}
	return q.schema + "." + q.name
}

func (s *PostgresSource) sequences(ctx context.Context) ([]sequence, error) {
	rows, err := s.conn.Query(ctx, `SELECT schemaname, sequencename, increment_by, cache_size FROM pg_sequences ORDER BY 1, 2`)
	if err != nil {
		return nil, err
	}
	var seqs []sequence
	for rows.Next() {
		var q sequence
		if err := rows.Scan(&q.schema, &q.name, &q.increment, &q.cache); err != nil {
			return nil, err
		}
		if ok, _ := path.Match(s.match, q.tag()); ok {
			seqs = append(seqs, q)
		}
	}
	return seqs, rows.Err()
}

// Total is the number of sequences selected.
func (s *PostgresSource) Total(ctx context.Context) int64 {
	seqs, err := s.sequences(ctx)
	if err != nil {
		return -1
	}
	return int64(len(seqs))
}

// Read reads each selected sequence's last_value and is_called, n
// sequences to a batch.
func (s *PostgresSource) Read(ctx context.Context, n int, emit func([]Counter) error) error {
	seqs, err := s.sequences(ctx)
	if err != nil {
		return err
	}
	batch := make([]Counter, 0, n)
	for _, q := range seqs {
		var last int64
		var called bool
		if err := s.conn.QueryRow(ctx, `SELECT last_value, is_called FROM `+pgx.Identifier{q.schema, q.name}.Sanitize()).Scan(&last, &called); err != nil {
			return fmt.Errorf("sequence %s: %w", q.tag(), err)
		}
		v, why := SequenceFloor(last, called, q.increment, q.cache)
		batch = append(batch, Counter{Key: q.tag(), Value: v, Refused: why})
		if len(batch) == n {
			if err := emit(batch); err != nil {
				return err
			}
			batch = make([]Counter, 0, n)
		}
	}
	if len(batch) > 0 {
		return emit(batch)
	}
	return nil
}

// SequenceFloor is the floor of a sequence whose row reads last_value
// last and is_called called: the highest value handed out (last when
// called, the one before it when not), plus cache*increment for values a
// session may hold in its cache. A descending sequence, a negative value
// or a floor past 2^63-1 is a reason to refuse.
func SequenceFloor(last int64, called bool, increment, cache int64) (int64, string) {
	if increment <= 0 {
		return 0, fmt.Sprintf("a descending sequence (increment %d): idserver's values only rise", increment)
	}
	high := big.NewInt(last)
	if !called {
		high.Sub(high, big.NewInt(increment))
	}
	floor := new(big.Int).Add(high, new(big.Int).Mul(big.NewInt(max(cache, 1)), big.NewInt(increment)))
	switch {
	case last < 0:
		return 0, fmt.Sprintf("last_value %d is negative (idserver's values are 0 to 9223372036854775807)", last)
	case !floor.IsInt64():
		return 0, fmt.Sprintf("last_value %d plus its cache (%d x %d) is above 9223372036854775807 (2^63-1)", last, cache, increment)
	}
	return floor.Int64(), ""
}

// Close ends the connection.
func (s *PostgresSource) Close() error { return s.conn.Close(context.Background()) }
