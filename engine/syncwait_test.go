package engine

import (
	"testing"
	"time"

	"idserver/internal/memstore"
)

// TestWindowSyncWaitHoldsNoLock: when the background step has fallen
// behind, a NEXTID that reaches the durable high-water syncs it itself.
// While that sync waits, Status (INFO, metrics) still answers and counts
// the wait; the ID leaves only once a high-water above its time is stored.
func TestWindowSyncWaitHoldsNoLock(t *testing.T) {
	clock, store := newFakeClock(), &memstore.HighWater{}
	g := newGen(t, clock, store, nil) // no Run: nothing steps the high-water
	if _, err := g.NextID(); err != nil {
		t.Fatal(err)
	}
	clock.Step(4 * time.Second) // past the first 3 s window
	store.Lock()                // the sync waits until the test lets it go
	held := true
	defer func() {
		if held {
			store.Unlock()
		}
	}()
	type result struct {
		id  int64
		err error
	}
	issued := make(chan result, 1)
	go func() {
		id, err := g.NextID()
		issued <- result{id, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		status := make(chan Status, 1)
		go func() { status <- g.Status() }()
		select {
		case st := <-status:
			if st.WindowSyncWaits == 1 {
				goto synced
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Status waited 2s for a NEXTID's high-water sync: the sync holds the generator's lock")
		}
		if time.Now().After(deadline) {
			t.Fatal("no NEXTID reached the high-water within 10s")
		}
		time.Sleep(time.Millisecond)
	}
synced:
	select {
	case r := <-issued:
		t.Fatalf("NEXTID answered %d, %v before its high-water was stored", r.id, r.err)
	default:
	}
	store.Unlock()
	held = false
	r := <-issued
	if r.err != nil {
		t.Fatal(r.err)
	}
	p, _ := g.Layout().Decode(r.id)
	if hw, _ := store.HighWater(); hw <= p.UnixMS-DefaultEpoch.UnixMilli() {
		t.Fatalf("ID of time %d ms left with the stored high-water at %d ms", p.UnixMS-DefaultEpoch.UnixMilli(), hw)
	}
	if n := g.Status().WindowSyncWaits; n != 1 {
		t.Fatalf("window_sync_waits %d, want 1", n)
	}
}
