//go:build race

package tests

// fsxDefaultOps is the length of the TestMountFsx* runs under the race
// detector (CI's go test -race); scripts/test.sh runs them with 100,000
// operations without it.
const fsxDefaultOps = 20000
