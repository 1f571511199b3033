package persist

import (
	"errors"
	"testing"
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
