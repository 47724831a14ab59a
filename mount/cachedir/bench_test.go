package cachedir

import (
	"fmt"
	"os"
	"testing"
)

// The durable close of a file an application wrote: the mount's Sync before
// close() returns. Run on a disk file system (testDir is on /var/tmp), since
// on tmpfs every sync is free.

// BenchmarkSyncNewFile: a new cache entry, 16 KiB written, Sync (cp of a
// small file).
func BenchmarkSyncNewFile(b *testing.B) {
	c, err := Open(benchDir(b), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer closeUntimed(b, c)
	p := pattern(1, 16<<10)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := c.File([]byte(fmt.Sprintf("new%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(p, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSyncRewrite: one durable entry, written back (clean), then its
// 16 KiB rewritten and Synced again and again (an editor saving a file in
// place).
func BenchmarkSyncRewrite(b *testing.B) {
	c, err := Open(benchDir(b), 0)
	if err != nil {
		b.Fatal(err)
	}
	defer closeUntimed(b, c)
	f, err := c.File([]byte("rewrite"))
	if err != nil {
		b.Fatal(err)
	}
	p := pattern(1, 16<<10)
	if _, err := f.WriteAt(p, 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.MarkClean(f.Dirty(), 2); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p[0] = byte(i)
		if _, err := f.WriteAt(p, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDir(b *testing.B) string {
	dir, err := os.MkdirTemp("/var/tmp", "cachedir-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func closeUntimed(b *testing.B, c *Cache) {
	b.StopTimer()
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
}
