# Runs in the Linux guest (--host-root), cwd = the NFS mount: changes d-guest,
# which an snfs mount on the host holds a directory promise of
# (TestMountSNFSNamesStockClients). Exits non-zero on the first failed check.
set -eu
fail() { echo "FAIL: $*"; exit 1; }
cd d-guest
mv a a2
touch c
chmod 600 a2
rm b
[ "$(ls | tr '\n' ' ')" = "a2 c " ] || fail "listing: $(ls)"
echo "--- all checks passed"
