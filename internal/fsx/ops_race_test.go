//go:build race

package fsx

// localOps is the length of TestLocalDisk under the race detector (CI's go test
// -race): 50,000 operations took 7.8 s on the 2-core development machine, where
// 100,000 took 15.8 s - most of it the detector checking the ~1.5 GB the run
// copies. The 100,000-operation runs are the mount tests', with their own budget.
const localOps = 50000
