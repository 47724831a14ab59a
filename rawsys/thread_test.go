package rawsys

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPollIn: a pipe is not readable until written, then readable; a closed
// descriptor is an error.
func TestPollIn(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	if ok, err := PollIn(p[0]); ok || err != nil {
		t.Fatalf("empty pipe: readable=%v err=%v", ok, err)
	}
	unix.Write(p[1], []byte("x"))
	if ok, err := PollIn(p[0]); !ok || err != nil {
		t.Fatalf("written pipe: readable=%v err=%v", ok, err)
	}
	unix.Close(p[1])
	// POLLNVAL is reported in revents, not as an error: a bad descriptor counts as
	// "ready" so that the next read reports it.
	if ok, _ := PollIn(1 << 20); !ok {
		t.Fatal("a bad descriptor must not look idle")
	}
}

// TestThreadCred: Setgroups, Setfsuid and Setfsgid change only the calling
// thread: a file created by it belongs to the new ids, and another thread
// keeps root's.
func TestThreadCred(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir, _ := testDir(t)
	os.Chmod(dir, 0o777)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with its changed identity
		if err := Setgroups([]uint32{4242}); err != nil {
			done <- err
			return
		}
		if prev := Setfsgid(1234); prev != 0 {
			t.Errorf("previous fsgid %d, want 0", prev)
		}
		Setfsuid(1235)
		if Setfsuid(^uint32(0)) != 1235 || Setfsgid(^uint32(0)) != 1234 {
			t.Error("fsuid/fsgid not read back")
		}
		groups := make([]uint32, 8)
		n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, 8, uintptr(bufPtr(groups)), 0)
		if e != 0 || n != 1 || groups[0] != 4242 {
			t.Errorf("getgroups: %v %d %v", e, n, groups[:n])
		}
		done <- os.WriteFile(dir+"/mine", nil, 0o644)
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir+"/mine", &st); err != nil || st.Uid != 1235 || st.Gid != 1234 {
		t.Fatalf("file made under the new ids: %+v %v", st, err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if Setfsuid(^uint32(0)) != 0 {
		t.Fatal("another thread's fsuid changed")
	}
}

// TestIoUringSubmitBadRing: a descriptor that is not a ring is refused with the
// kernel's error.
func TestIoUringSubmitBadRing(t *testing.T) {
	if _, err := IoUringSubmit(0, 1); err == nil {
		t.Fatal("io_uring_enter on a non-ring descriptor succeeded")
	}
}
