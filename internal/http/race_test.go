//go:build race

package http_test

// raceAllocs is how many more times a call allocates in a race build: there
// crypto/rand.Read moves the request id's buffer to the heap.
const raceAllocs = 1
