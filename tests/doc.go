// Package tests holds snfs's end-to-end tests: an in-process server on real
// loopback sockets and a real disk directory, driven by the Go client, by libnfs's
// command-line tools, and by the stock Linux kernel NFS client in a User-Mode-Linux
// guest (../shared/tools/linux-nfs-client). Tests that need root, libnfs-utils or the
// guest say so and skip when it is missing; CI has all three. The guest's lock
// tests (nlm_guest_*_test.go) let the server call the guest back (GRANTED,
// SM_NOTIFY) through slirp port redirections read from $HOME/.slirprc.
//
// Some tests run `snfs serve` and `snfs mount` as real processes of a freshly
// built binary (proc_harness_test.go, mount_recover_test.go) to kill them with
// SIGKILL or to put snfs/internal/faultproxy between a mount and the server:
// the partition tests (partition_test.go), the crash cycles
// (crash_cycle_test.go; SNFS_CRASH_CYCLES, SNFS_CRASH_SEED) and the soak of
// write-back permits (permits_soak_test.go; SNFS_SOAK, SNFS_SOAK_SEED).
//
// Every test calls t.Parallel first unless it uses something of the whole
// machine or process, and then says why it is serial: the Linux guest and the
// host's port 111, ganesha (the host's /run/rpcbind.sock), /dev/fuse's mode,
// /etc/fuse.conf or helpers under /sbin, the process's heap or open
// descriptors (posixtest's FdLeak), or a duration it bounds. Go runs all
// serial tests first, then the parallel ones, -parallel at a time
// (scripts/test.sh sets it). A parallel test keeps to its own env, export,
// mounts and processes (diskTempDir, newEnv, freePort).
//
// The programs a test runs are started by the run's spawner process
// (spawner_test.go), never forked from the test process, which holds the
// files the parallel tests have open on the FUSE mounts it serves: command
// and commandContext (spawn_test.go) are the tests' exec.Command.
package tests
