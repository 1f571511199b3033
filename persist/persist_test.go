package persist

import (
	"errors"
	"testing"

	"idserver/internal/testproc"
)

func TestHighWaterSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if hw, err := s.HighWater(); err != nil || hw != 0 {
		t.Fatalf("fresh store: %d, %v", hw, err)
	}
	if err := s.SetHighWaterSync(123456789); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if hw, err := s.HighWater(); err != nil || hw != 123456789 {
		t.Fatalf("after reopen: %d, %v", hw, err)
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
}

func TestLayoutAndNodeIDAreKept(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureLayout("A"); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureLayout("A"); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureLayout("B"); !errors.Is(err, ErrLayoutMismatch) {
		t.Fatalf("changed layout: %v", err)
	}
	id, err := s.NodeID("")
	if err != nil || len(id) != 16 {
		t.Fatalf("generated node id %q, %v", id, err)
	}
	s.Close()
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if again, err := s.NodeID(""); err != nil || again != id {
		t.Fatalf("node id after reopen %q, %v; want %q", again, err, id)
	}
	if _, err := s.NodeID("other"); err == nil {
		t.Fatal("a different --node-id on an existing directory was accepted")
	}
}

func TestBatchAndScan(t *testing.T) {
	testproc.Long(t)
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	b.Set("fsm/a", []byte("1"))
	b.Set("fsm/b", []byte("2"))
	b.Set("other", []byte("3"))
	if err := b.CommitSync(); err != nil {
		t.Fatal(err)
	}
	var got []string
	s.Scan("fsm/", func(k string, v []byte) error { got = append(got, k+"="+string(v)); return nil })
	if len(got) != 2 || got[0] != "fsm/a=1" || got[1] != "fsm/b=2" {
		t.Fatalf("scan: %v", got)
	}
	b = s.NewBatch()
	b.DeletePrefix("fsm/")
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	got = nil
	s.Scan("fsm/", func(k string, v []byte) error { got = append(got, k); return nil })
	if _, ok, _ := s.Get("other"); len(got) != 0 || !ok {
		t.Fatalf("after DeletePrefix: %v, other kept: %v", got, ok)
	}
}

// The wall clock stored beside the high-water survives a reopen, and a
// mark written without it (as a build before the key writes it) leaves
// the old wall clock unattributed.
func TestHighWaterWallBelongsToItsMark(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.HighWaterWall(); err != nil || ok {
		t.Fatalf("fresh store: %v, %v", ok, err)
	}
	if err := s.SetHighWaterWallSync(5000, 2000); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if hw, err := s.HighWater(); err != nil || hw != 5000 {
		t.Fatalf("after reopen: high-water %d, %v", hw, err)
	}
	if wall, ok, err := s.HighWaterWall(); err != nil || !ok || wall != 2000 {
		t.Fatalf("after reopen: wall %d, %v, %v; want 2000", wall, ok, err)
	}
	if err := s.SetHighWaterSync(9000); err != nil {
		t.Fatal(err)
	}
	if wall, ok, err := s.HighWaterWall(); err != nil || ok {
		t.Fatalf("mark written alone: wall %d, %v, %v; want none", wall, ok, err)
	}
}
