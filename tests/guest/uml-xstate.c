/*
 * uml-xstate: an LD_PRELOAD shim that lets Debian's User-Mode-Linux 6.1 (the
 * Linux guest of ../shared/tools/linux-nfs-client) run on hosts whose CPUs
 * have AMX (Intel Sapphire Rapids and later).
 *
 * Why: UML saves and restores its processes' FPU state with
 * ptrace(PTRACE_GETREGSET/PTRACE_SETREGSET, NT_X86_XSTATE) into a buffer sized
 * for the XSAVE features it knows. The host kernel answers a GETREGSET with a
 * shorter buffer by truncating, but refuses a SETREGSET whose buffer is not
 * the whole XSAVE area (EFAULT), and with AMX's tile data that area is about
 * 11 KB: UML then panics at boot ("ptrace set fp regs failed, errno = 14").
 *
 * What: a SETREGSET shorter than the host's area is made whole: the tracee's
 * current area is read, UML's part (every component up to its size: x87,
 * SSE, AVX, AVX-512) is laid over it, and the whole area is set. Components
 * past UML's size (AMX tile data, which the guest never enables) keep the
 * tracee's own state. Every other ptrace call goes through unchanged, so on
 * hosts without the problem nothing changes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

static long (*real_ptrace)(int, pid_t, void *, void *);
static __thread unsigned char whole[1 << 16];

long ptrace(enum __ptrace_request req, ...)
{
	va_list ap;
	va_start(ap, req);
	pid_t pid = va_arg(ap, pid_t);
	void *addr = va_arg(ap, void *);
	void *data = va_arg(ap, void *);
	va_end(ap);
	if (!real_ptrace)
		real_ptrace = (long (*)(int, pid_t, void *, void *))dlsym(RTLD_NEXT, "ptrace");
	if (req == PTRACE_SETREGSET && (unsigned long)addr == NT_X86_XSTATE && data) {
		struct iovec *iov = data;
		struct iovec w = {whole, sizeof whole};
		long r = real_ptrace(PTRACE_GETREGSET, pid, addr, &w);
		if (r < 0)
			return r;
		if (iov->iov_len < w.iov_len) {
			memcpy(whole, iov->iov_base, iov->iov_len);
			return real_ptrace(PTRACE_SETREGSET, pid, addr, &w);
		}
	}
	return real_ptrace(req, pid, addr, data);
}
