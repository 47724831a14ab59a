package fsx_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"snfs/internal/fsx"
)

// A run against a mount, checked every 5,000 operations through the server's
// export directory (after the fsync the data must be on the server) and through a
// second mount (after the close: close-to-open, the second client opens the file
// after the first closed it).
func Example() {
	mount, second, export := "/mnt/a", "/mnt/b", "/var/tmp/export" // the test's own
	exportCheck := fsx.CompareFile(filepath.Join(export, "fsx.dat"))
	secondCheck := fsx.CompareFile(filepath.Join(second, "fsx.dat"))
	cfg := fsx.Config{
		Path: filepath.Join(mount, "fsx.dat"), Ops: 100000, Seed: 1,
		Mmap: true, Fsync: true, ReopenEvery: 1000,
		CheckEvery: 5000, CheckPrep: fsx.PrepFsyncClose,
		ExternalCheck: func(ctx context.Context, s fsx.Snapshot) error {
			if err := exportCheck(ctx, s); err != nil {
				return err
			}
			return secondCheck(ctx, s)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := os.Stat(mount); err != nil {
		return // no mount here
	}
	rep, err := fsx.Run(ctx, cfg)
	fmt.Println(rep, err) // an *fsx.Error names the seed, op, bytes and the replay flags
}
