package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// libnfsOpSrc is a plain NFSv3 client built on libnfs, for what libnfs-utils'
// tools cannot do (nfs-cp only creates files, with a GUARDED CREATE; nothing
// renames or removes). Each run is one application operation, acknowledged
// when the program exits 0:
//
//	nfs-op write URL OFFSET create|trunc|create-trunc|keep < data
//	    open(O_WRONLY, plus O_CREAT and/or O_TRUNC), pwrite, fsync, close
//	nfs-op rename URL NEWPATH   (NEWPATH inside the export, from its root)
//	nfs-op unlink URL
//
// Exit status: 0 done, 3 the file (or rename source) does not exist, 1 other
// errors (the message on stderr), 2 usage.
const libnfsOpSrc = `#define _FILE_OFFSET_BITS 64
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nfsc/libnfs.h>

static int fail(struct nfs_context *nfs, const char *what, int r) {
	fprintf(stderr, "%s: %s\n", what, nfs_get_error(nfs));
	return r == -ENOENT ? 3 : 1;
}

int main(int argc, char **argv) {
	static char buf[4 << 20];
	if (argc < 3) { fprintf(stderr, "usage\n"); return 2; }
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *url = nfs ? nfs_parse_url_full(nfs, argv[2]) : NULL;
	if (url == NULL) { fprintf(stderr, "url: %s\n", nfs ? nfs_get_error(nfs) : "no context"); return 1; }
	int r = nfs_mount(nfs, url->server, url->path);
	if (r != 0) return fail(nfs, "mount", r);
	if (strcmp(argv[1], "write") == 0 && argc == 5) {
		size_t n = fread(buf, 1, sizeof buf, stdin);
		uint64_t off = strtoull(argv[3], NULL, 10);
		int flags = O_WRONLY;
		if (strstr(argv[4], "create")) flags |= O_CREAT;
		if (strstr(argv[4], "trunc")) flags |= O_TRUNC;
		struct nfsfh *fh;
		if ((r = nfs_open2(nfs, url->file, flags, 0644, &fh)) != 0) return fail(nfs, "open", r);
		for (size_t done = 0; done < n;) {
#ifdef LIBNFS_API_V2
			r = nfs_pwrite(nfs, fh, buf + done, n - done, off + done);
#else
			r = nfs_pwrite(nfs, fh, off + done, n - done, buf + done);
#endif
			if (r <= 0) return fail(nfs, "pwrite", r);
			done += r;
		}
		if ((r = nfs_fsync(nfs, fh)) != 0) return fail(nfs, "fsync", r);
		if ((r = nfs_close(nfs, fh)) != 0) return fail(nfs, "close", r);
	} else if (strcmp(argv[1], "rename") == 0 && argc == 4) {
		if ((r = nfs_rename(nfs, url->file, argv[3])) != 0) return fail(nfs, "rename", r);
	} else if (strcmp(argv[1], "unlink") == 0 && argc == 3) {
		if ((r = nfs_unlink(nfs, url->file)) != 0) return fail(nfs, "unlink", r);
	} else {
		fprintf(stderr, "usage\n");
		return 2;
	}
	nfs_destroy_url(url);
	nfs_destroy_context(nfs);
	return 0;
}
`

var libnfsOp struct {
	once sync.Once
	bin  string
	err  string // why it could not be built
	dir  string
}

// libnfsOpTool builds libnfsOpSrc once per test binary (libnfs-dev and a C
// compiler, which .ci/run installs) and returns the program's path, or ""
// and why it cannot.
func libnfsOpTool() (string, string) {
	libnfsOp.once.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			libnfsOp.err = "no C compiler (cc) to build the libnfs client (.ci/run installs gcc)"
			return
		}
		if _, err := os.Stat("/usr/include/nfsc/libnfs.h"); err != nil {
			libnfsOp.err = "libnfs headers missing (Debian libnfs-dev; .ci/run installs it)"
			return
		}
		dir, err := os.MkdirTemp("", "snfs-nfs-op-")
		if err != nil {
			libnfsOp.err = err.Error()
			return
		}
		libnfsOp.dir = dir
		src, bin := filepath.Join(dir, "nfs-op.c"), filepath.Join(dir, "nfs-op")
		if err := os.WriteFile(src, []byte(libnfsOpSrc), 0o644); err != nil {
			libnfsOp.err = err.Error()
			return
		}
		if out, err := command(cc, "-O1", "-o", bin, src, "-lnfs").CombinedOutput(); err != nil {
			libnfsOp.err = "building the libnfs client: " + err.Error() + "\n" + string(out)
			return
		}
		libnfsOp.bin = bin
	})
	return libnfsOp.bin, libnfsOp.err
}

// requireLibnfsOp returns the libnfs client's path, or skips the test (fails
// it in CI) when it cannot be built.
func requireLibnfsOp(t *testing.T) string {
	t.Helper()
	bin, why := libnfsOpTool()
	if bin == "" {
		requireInCI(t, why)
	}
	return bin
}
