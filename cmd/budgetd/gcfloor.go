package main

import "runtime"

// gcFloor sets mib MiB of heap aside until release is called, so that the
// garbage collector's goal is at least about twice that however small the
// live heap is (docs/operations.md "Garbage collection"). A service that
// keeps little and allocates a few kB per request otherwise collects
// hundreds of times a second at Go's 4 MiB minimum goal, and each cycle
// shrinks the stacks of the connections' goroutines, which then grow again.
//
// The bytes are pointer-free and never read or written: the runtime takes
// fresh pages from the kernel for an allocation this large and does not
// zero them, so they are address space only, never resident memory. They
// count toward GOMEMLIMIT, which sees the heap as the runtime does.
func gcFloor(mib int) (release func()) {
	if mib <= 0 {
		return func() {}
	}
	floor := make([]byte, mib<<20)
	return func() { runtime.KeepAlive(floor) }
}
