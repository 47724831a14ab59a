# Runs in the Linux guest after nlm-setup.sh (TestLinuxClientSQLite): the
# guest's sqlite3 runs the host test's transactions (sqlite.sql: each
# increments the counter in db, rollback-journal mode) at the same time as
# two snfs mounts on the host run theirs; SQLite's fcntl locks go to the
# server through the guest's lockd.
echo "--- sqlite3 in the guest: $(grep -c '^COMMIT' sqlite.sql) transactions"
touch guest.ready
waitfor go
t0=$(date +%s.%N)
sqlite3 -bail db < sqlite.sql > /dev/shm/sqlite.out 2>&1 || { cat /dev/shm/sqlite.out; fail "sqlite3 in the guest"; }
echo "--- the guest's transactions took $(echo "$(date +%s.%N) - $t0" | bc) s"
cd /
umount $M || fail "umount"
echo "--- all checks passed"
