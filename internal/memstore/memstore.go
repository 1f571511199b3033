// Package memstore is a high-water store in memory, for tests and
// benchmarks that run the generator without Pebble: it has the methods of
// engine.HighWaterStore, counts its writes and can be made to fail or to
// wait.
package memstore

import "sync"

// HighWater holds the high-water mark in memory. Its zero value is an
// empty store. A test that holds its lock (Lock) makes SetHighWaterSync
// wait, as a slow fsync would.
type HighWater struct {
	sync.Mutex
	ms     int64
	wall   int64 // the wall clock ms was stored at
	walled bool  // wall belongs to ms (SetHighWaterWallSync wrote it)
	writes int
	fail   error
}

// HighWater returns the stored mark.
func (s *HighWater) HighWater() (int64, error) {
	s.Lock()
	defer s.Unlock()
	return s.ms, nil
}

// SetHighWaterSync stores ms, or returns the error given to FailWith.
func (s *HighWater) SetHighWaterSync(ms int64) error {
	s.Lock()
	defer s.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.ms, s.walled = ms, false
	s.writes++
	return nil
}

// HighWaterWall returns the wall clock the stored mark was written at,
// with ok false when the mark was stored without one (SetHighWaterSync).
func (s *HighWater) HighWaterWall() (wallMS int64, ok bool, err error) {
	s.Lock()
	defer s.Unlock()
	return s.wall, s.walled, nil
}

// SetHighWaterWallSync stores ms and the wall clock wallMS it was written
// at, or returns the error given to FailWith.
func (s *HighWater) SetHighWaterWallSync(ms, wallMS int64) error {
	s.Lock()
	defer s.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.ms, s.wall, s.walled = ms, wallMS, true
	s.writes++
	return nil
}

// Value is the stored mark.
func (s *HighWater) Value() int64 {
	ms, _ := s.HighWater()
	return ms
}

// Writes counts the successful SetHighWaterSync calls.
func (s *HighWater) Writes() int {
	s.Lock()
	defer s.Unlock()
	return s.writes
}

// FailWith makes every later SetHighWaterSync return err (nil: succeed
// again).
func (s *HighWater) FailWith(err error) {
	s.Lock()
	defer s.Unlock()
	s.fail = err
}
