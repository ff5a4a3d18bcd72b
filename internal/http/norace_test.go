//go:build !race

package http_test

// raceAllocs is 0 outside a race build (race_test.go).
const raceAllocs = 0
