# Runs in the Linux guest (--host-root), cwd = the NFS mount. coexist.bin holds
# 12 KiB of '0' on the server, and a protocol client on the host (A) has it open
# for writing with 8 KiB of 'A' at offset 0 not yet written back. The kernel
# client's writes must land after A's write-back (TestCoexistLinuxClient).
set -eu
fail() { echo "FAIL: $*"; exit 1; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
rep() { head -c "$2" /dev/zero | tr '\0' "$1"; }

echo "--- write 100 'G' at offset 4096 into a file A caches with dirty data"
rep G 100 | dd of=coexist.bin bs=4096 seek=1 conv=notrunc 2>/dev/null
drop
{ rep A 4096; rep G 100; rep A 3996; rep 0 4096; } > $TMPDIR/want
cmp coexist.bin $TMPDIR/want || fail "content after the write: $(od -c coexist.bin | head -20)"

echo "--- append"
printf TAIL >> coexist.bin
drop
printf TAIL >> $TMPDIR/want
[ "$(stat -c %s coexist.bin)" = 12292 ] || fail "size after the append: $(stat -c %s coexist.bin)"
cmp coexist.bin $TMPDIR/want || fail "content after the append"
echo "--- all checks passed"
