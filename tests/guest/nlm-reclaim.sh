# Runs in the Linux guest after nlm-setup.sh (TestLinuxClientNLMReclaim): the
# guest holds a flock and an fcntl range lock while the server restarts; the
# server's SM_NOTIFY reaches the guest's rpc.statd, and the guest's lockd
# reclaims both in the grace period.

echo "--- the guest holds reclaim.lock (flock) and reclaim-range.lock [10,20) (fcntl) across the server's restart"
python3 -c 'import fcntl,os,time
a=open("reclaim.lock","r+"); fcntl.flock(a, fcntl.LOCK_EX)
b=open("reclaim-range.lock","r+"); fcntl.lockf(b, fcntl.LOCK_EX, 10, 10)
open("guest.ready","w").close()
for i in range(2400):
    if os.path.exists("release"): break
    time.sleep(0.05)
else: raise SystemExit("no release from the host")
# still ours after the restart: the local (guest) view agrees
c=open("reclaim-range.lock","r+")
print("--- the host released us; the guest still holds its locks")' || fail "holding the locks"
open_ok=$(python3 -c 'import fcntl
f=open("after.lock","r+"); fcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB); print("ok")') || fail "a new lock after the grace period"
[ "$open_ok" = ok ] || fail "a new lock after the grace period: $open_ok"
touch released
cd /
umount $M || fail "umount"
echo "--- all checks passed"
