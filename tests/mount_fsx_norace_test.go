//go:build !race

package tests

// fsxDefaultOps is the length of the TestMountFsx* runs without the race
// detector: issue 14's 100,000 operations (about 30 s per test on the 2-core
// development machine).
const fsxDefaultOps = 100000
