package cluster

import (
	"bytes"
	"testing"

	"idserver/engine"
)

// TestFSMPublicKeyIsSetOnceAndSurvives: the first public-ID key committed
// stays (a second proposal, from another leader, changes nothing; a key of
// the wrong length is not stored), and it survives a reopen from Pebble
// and a snapshot restored into another store.
func TestFSMPublicKeyIsSetOnceAndSurvives(t *testing.T) {
	store := openStore(t)
	f, _ := newFSM(store, 1023)
	if f.publicKey() != nil {
		t.Fatal("a new state machine has a public-ID key")
	}
	k1, k2 := bytes.Repeat([]byte{1}, engine.PublicKeyLen), bytes.Repeat([]byte{2}, engine.PublicKeyLen)
	if got := applyEntry(t, f, 1, newEntry(entryPublicKey).string("short")).([]byte); got != nil {
		t.Fatalf("a 5-byte key was stored: %x", got)
	}
	if got := applyEntry(t, f, 2, newEntry(entryPublicKey).string(string(k1))).([]byte); !bytes.Equal(got, k1) {
		t.Fatalf("first key: answered %x", got)
	}
	if got := applyEntry(t, f, 3, newEntry(entryPublicKey).string(string(k2))).([]byte); !bytes.Equal(got, k1) {
		t.Fatalf("second key: answered %x, want the first to stay", got)
	}
	g, err := newFSM(store, 1023)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.publicKey(), k1) {
		t.Fatalf("after reopen: key %x", g.publicKey())
	}
	h, _ := newFSM(openStore(t), 1023)
	applyEntry(t, h, 1, newEntry(entryPublicKey).string(string(k2)))
	if err := h.Restore(snapshotOf(t, f)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.publicKey(), k1) {
		t.Fatalf("after restore: key %x, want the snapshot's", h.publicKey())
	}
}
