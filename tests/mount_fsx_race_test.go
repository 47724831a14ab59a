//go:build race

package tests

// fsxDefaultOps is the length of the TestMountFsx* runs under the race
// detector (CI's go test -race): 20,000 operations take about 21 s per test on
// the 2-core development machine, 67 s for the three; 100,000 would take
// about 105 s each. scripts/test.sh runs them with 100,000 operations without
// the detector (about 30 s each). The race run is kept: the interleavings it
// makes (a readahead READ overtaken by a SETATTR) found a bug the faster run
// did not.
const fsxDefaultOps = 20000
