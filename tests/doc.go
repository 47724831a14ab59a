// Package tests holds snfs's end-to-end tests: an in-process server on real
// loopback sockets and a real disk directory, driven by the Go client, by libnfs's
// command-line tools, and by the stock Linux kernel NFS client in a User-Mode-Linux
// guest (../shared/tools/linux-nfs-client). Tests that need root, libnfs-utils or the
// guest say so and skip when it is missing; CI has all three.
package tests
