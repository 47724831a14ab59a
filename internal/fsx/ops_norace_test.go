//go:build !race

package fsx

// localOps is the length of TestLocalDisk without the race detector: 100,000
// operations, 4.6 s on the 2-core development machine.
const localOps = 100000
