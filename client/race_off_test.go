//go:build !race

package idclient

const raceEnabled = false
