# Runs in the Linux guest (--host-root), cwd = the NFS mount; root sets up, then
# uid 1000 is checked against the server's permission decisions.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
echo root > rootfile; chmod 0644 rootfile
mkdir -m 0755 rootdir; echo x > rootdir/f
mkdir -m 0777 open
U="setpriv --reuid=1000 --regid=1000 --clear-groups"
$U sh -c 'echo mine > open/mine' || fail "uid 1000 create in 0777 dir"
[ "$(stat -c %u:%g open/mine)" = 1000:1000 ] || fail "owner $(stat -c %u:%g open/mine)"
out=$($U sh -c 'echo y > rootfile' 2>&1) && fail "uid 1000 wrote root's 0644 file"
echo "$out" | grep -q "Permission denied" || fail "write error: $out"
out=$($U rm -f rootdir/f 2>&1) && fail "uid 1000 removed from root's 0755 dir"
echo "$out" | grep -q "Permission denied" || fail "remove error: $out"
[ "$(cat rootfile)" = root ] && [ -f rootdir/f ] || fail "root's files changed"
$U sh -c 'echo ro > open/ro; chmod 0444 open/ro; cat open/ro' | grep -q ro || fail "owner reads own 0444 file"
echo "--- all checks passed"
