# Runs in the Linux guest (--host-root). The stock kernel client mounts the
# export again WITH locks (NLM): the guest first runs its own rpcbind and
# rpc.statd (the kernel's lockd registers with the one, and monitors the server
# through the other), then finds the server's NLM through the server's rpcbind
# (TestLinuxClientNLM runs one on the host's 127.0.0.1:111). The host test and
# this script meet through files in the export.
set -u
fail() { echo "FAIL: $*"; exit 1; }
line=$(grep " /run/nfs " /proc/mounts)
src=${line%% *}
port=$(echo "$line" | sed -n 's/.*[,]port=\([0-9]*\).*/\1/p')
mport=$(echo "$line" | sed -n 's/.*mountport=\([0-9]*\).*/\1/p')

echo "--- rpcbind and rpc.statd in the guest"
mkdir -p /run/rpcbind /dev/shm/statd/sm /dev/shm/statd/sm.bak
chown -R statd /dev/shm/statd || fail "no statd user"
rpcbind -w || fail "rpcbind"
rpc.statd -P /dev/shm/statd --no-notify || fail "rpc.statd"
M=/dev/shm/m
mkdir -p $M
opts=vers=3,proto=tcp,port=$port,mountport=$mport,mountproto=tcp,lock,lookupcache=none,actimeo=0
echo "--- mount -t nfs -o $opts $src $M"
mount -t nfs -o $opts $src $M || fail "mount with lock"
grep " $M " /proc/mounts
cd $M

waitfor() { # waitfor FILE: the host test's signal
  for i in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done
  fail "no $1 from the host"
}
lockf_nb() { # lockf_nb FILE START LEN: a non-blocking fcntl write lock
  python3 -c 'import fcntl,sys
f=open(sys.argv[1],"r+")
fcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB, int(sys.argv[3]), int(sys.argv[2]))' "$@" 2>/dev/null
}

echo "--- a Go NLM client on the host holds held.lock [0,100): flock and fcntl here fail"
flock -n -x held.lock true && fail "flock took held.lock"
lockf_nb held.lock 50 1 && fail "fcntl took [50,51) of held.lock"
lockf_nb held.lock 100 10 || fail "fcntl [100,110) of held.lock, past the Go client's lock"
echo "--- a local process on the server holds local.lock: flock here fails"
flock -n -x local.lock true && fail "flock took local.lock"

echo "--- the guest holds guest.lock (flock) and guest-range.lock [10,20) (fcntl) until the host releases them"
python3 -c 'import fcntl,os,time
a=open("guest.lock","r+"); fcntl.flock(a, fcntl.LOCK_EX)
b=open("guest-range.lock","r+"); fcntl.lockf(b, fcntl.LOCK_EX, 10, 10)
open("guest.ready","w").close()
for i in range(600):
    if os.path.exists("release"): break
    time.sleep(0.1)
else: raise SystemExit("no release from the host")' || fail "holding guest.lock"

echo "--- the guest waits for wait.lock, which the Go client holds and then releases"
touch waiting
t0=$(date +%s)
flock -x -w 120 wait.lock -c 'touch wait.got' || fail "flock wait.lock never granted"
echo "--- wait.lock granted after $(( $(date +%s) - t0 )) s"
cd /
umount $M || fail "umount"
echo "--- all checks passed"
