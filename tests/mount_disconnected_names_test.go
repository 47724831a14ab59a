package tests

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestMountDisconnectedListing (docs/mount.md, "Disconnected operation"):
// a directory listed through the mount is served offline as the mount last
// knew it: `ls` lists its names, `stat` of each gives the attributes last
// seen (of names never looked up too), a name not in it is ENOENT (the
// listing is complete), and so is one made on the server meanwhile while
// the server cannot tell; back online, that name is seen. Offline on
// request (SIGUSR1, the connection up: the server's break of the promise
// for a change made there drops the copy) and with the server killed (the
// connection lost).
func TestMountDisconnectedListing(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"request", "kill"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s := newServeProc(t, "--grace", "2s")
			if err := os.MkdirAll(s.path("d/e"), 0o777); err != nil {
				t.Fatal(err)
			}
			sizes := map[string]int{"a": 1234, "b": 56789}
			for name, n := range sizes {
				if err := os.WriteFile(s.path("d/"+name), randBytes(uint64(n), n), 0o640); err != nil {
					t.Fatal(err)
				}
			}
			m := startMount(t, s, "", "", "--disconnected=auto", "--disconnect-after=2s", "--log-level=debug")
			names := func() ([]string, error) {
				ents, err := os.ReadDir(m.path("d"))
				var out []string
				for _, e := range ents {
					out = append(out, e.Name())
				}
				return out, err
			}
			if got, err := names(); err != nil || !slices.Equal(got, []string{"a", "b", "e"}) {
				t.Fatalf("ls d online: %v, %v", got, err)
			}

			switch how {
			case "request":
				if err := m.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
					t.Fatal(err)
				}
			case "kill":
				if err := s.kill9(); err != nil {
					t.Fatal(err)
				}
				// Between the lost connection and going offline, a lookup
				// (the name cache sees the connection lost and keeps its
				// listings: they must not go because a call answered
				// before the loss still holds the lease).
				time.Sleep(300 * time.Millisecond)
				err, d := timedErr(t, "stat before the mount goes offline", 20*time.Second, func() error {
					_, err := os.Stat(m.path("d/a"))
					return err
				})
				t.Logf("stat of d/a with the server killed, before offline: %v in %v", err, d.Round(time.Millisecond))
			}
			waitMetric(t, m, "snfs_client_disconnected", 1, 20*time.Second)
			// Made on the server while the mount is offline. With the
			// connection up (offline on request), the server's change
			// notifier breaks d's promise within its drain period and the
			// copy goes (known stale): so this name is made after the
			// copy's checks; with the server killed, before them.
			makeNew := func() {
				if err := os.WriteFile(s.path("d/new"), []byte("made meanwhile"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			notListed := []string{"nope"}
			if how == "kill" {
				makeNew()
				notListed = append(notListed, "new")
			}

			var got []string
			err, d := timedErr(t, "ls offline", 10*time.Second, func() (err error) {
				got, err = names()
				return err
			})
			if err != nil || !slices.Equal(got, []string{"a", "b", "e"}) {
				t.Fatalf("ls d offline: %v, %v (in %v); want the listing last seen [a b e]", got, err, d)
			}
			for name, n := range sizes {
				fi, err := os.Stat(m.path("d/" + name))
				if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(n) || fi.Mode().Perm() != 0o640 {
					t.Fatalf("stat d/%s offline: %v, %v; want a regular file of %d bytes, mode 0640", name, fi, err, n)
				}
			}
			if fi, err := os.Stat(m.path("d/e")); err != nil || !fi.IsDir() {
				t.Fatalf("stat d/e offline: %v, %v; want a directory", fi, err)
			}
			for _, name := range notListed {
				err, d := timedErr(t, "stat of a name not listed offline", 10*time.Second, func() error {
					_, err := os.Stat(m.path("d/" + name))
					return err
				})
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("stat d/%s offline: %v (in %v); want ENOENT (not in the complete listing last seen)", name, err, d)
				}
			}
			// A directory never listed is not known.
			if _, err := os.ReadDir(m.path("d/e")); !errors.Is(err, syscall.EHOSTDOWN) {
				t.Fatalf("ls d/e (never listed) offline: %v; want EHOSTDOWN", err)
			}
			if how == "request" {
				// The break of d's promise (the connection is up) drops
				// the copy: d is known changed, its names are no longer
				// answered offline (docs/mount.md, "Listings offline").
				makeNew()
				deadline := time.Now().Add(20 * time.Second)
				for {
					_, err := names()
					if errors.Is(err, syscall.EHOSTDOWN) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("ls d offline after a change on the server with the connection up: %v; want EHOSTDOWN (the break drops the copy)\n%s", err, tail(m.logPath, 40))
					}
					time.Sleep(20 * time.Millisecond)
				}
				if _, err := os.Stat(m.path("d/nope")); !errors.Is(err, syscall.EHOSTDOWN) {
					t.Fatalf("stat d/nope offline after the break: %v; want EHOSTDOWN (d's copy is known stale)", err)
				}
			}

			switch how {
			case "request":
				if err := m.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
					t.Fatal(err)
				}
			case "kill":
				if err := s.startErr(); err != nil {
					t.Fatal(err)
				}
			}
			waitMetric(t, m, "snfs_client_disconnected", 0, 30*time.Second)
			if _, err := os.Stat(m.path("d/new")); err != nil {
				t.Fatalf("stat d/new back online: %v\n%s", err, tail(m.logPath, 40))
			}
			if got, err := names(); err != nil || !slices.Equal(got, []string{"a", "b", "e", "new"}) {
				t.Fatalf("ls d back online: %v, %v; want [a b e new]", got, err)
			}
		})
	}
}
