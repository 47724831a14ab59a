# Runs in the Linux guest (--host-root), cwd = the NFS mount. Exits non-zero on the
# first failed check.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

echo "--- files: create, write, read, append, truncate, chmod"
printf 'hello\n' > a.txt
[ "$(cat a.txt)" = hello ] || fail "read back"
printf 'world\n' >> a.txt
drop
[ "$(cat a.txt)" = "$(printf 'hello\nworld')" ] || fail "append"
truncate -s 3 a.txt; drop
[ "$(cat a.txt)" = hel ] || fail "truncate"
truncate -s 10000 a.txt; [ "$(stat -c %s a.txt)" = 10000 ] || fail "extend"
chmod 0600 a.txt; [ "$(stat -c %a a.txt)" = 600 ] || fail "chmod"
touch -d '2001-02-03 04:05:06 UTC' a.txt; drop
[ "$(stat -c %Y a.txt)" = 981173106 ] || fail "utimes"

echo "--- rename, link, symlink"
mv a.txt b.txt; [ ! -e a.txt ] && [ -f b.txt ] || fail "rename"
ln b.txt c.txt; [ "$(stat -c %h b.txt)" = 2 ] || fail "link count"
ln -s b.txt s.lnk; [ "$(readlink s.lnk)" = b.txt ] || fail "readlink"
[ "$(head -c 3 s.lnk)" = hel ] || fail "read through symlink"
printf 'over' > new.txt; mv new.txt b.txt; [ "$(cat c.txt)" = hel ] || fail "rename over a linked file"
rm b.txt c.txt s.lnk

echo "--- directories"
mkdir -p d1/d2/d3; echo x > d1/d2/d3/f
mv d1/d2 d1/dd; [ "$(cat d1/dd/d3/f)" = x ] || fail "dir rename"
if rmdir d1 2>/dev/null; then fail "rmdir of a non-empty dir"; fi
rm -r d1; [ ! -e d1 ] || fail "rm -r"

echo "--- 2000 files in one directory"
mkdir many
i=0; while [ $i -lt 2000 ]; do : > many/f$i; i=$((i+1)); done
drop
[ "$(ls many | wc -l)" = 2000 ] || fail "ls many: $(ls many | wc -l)"
[ "$(ls many | sort -u | wc -l)" = 2000 ] || fail "duplicate names"
rm -r many; [ ! -e many ] || fail "rm many"

echo "--- 64 MiB file with checksum"
head -c 67108864 /dev/urandom > $TMPDIR/big
sum=$(sha256sum < $TMPDIR/big)
cp $TMPDIR/big big.bin; rm $TMPDIR/big
drop
[ "$(sha256sum < big.bin)" = "$sum" ] || fail "64 MiB checksum"
echo "$sum" | cut -d' ' -f1 > big.sha256
echo "--- all checks passed"
