# Runs in the Linux guest (--host-root) before a lock script (the tests
# prepend it: guestLockRun). The stock kernel client mounts the export again
# WITH locks (NLM) at $M, the working directory after this: the guest first
# runs its own rpcbind and rpc.statd (the kernel's lockd registers with the
# one, and monitors the server through the other), with lockd and statd on the
# ports the host test redirects into the guest (guest-ports in the export:
# LOCKD STATD), so that the server's GRANTED and SM_NOTIFY calls reach them.
# The guest finds the server's NLM through the server's rpcbind (the test's
# on the host's 127.0.0.1:111). The host test and the script meet through
# files in the export.
set -u
fail() { echo "FAIL: $*"; exit 1; }
line=$(grep " /run/nfs " /proc/mounts)
src=${line%% *}
port=$(echo "$line" | sed -n 's/.*[,]port=\([0-9]*\).*/\1/p')
mport=$(echo "$line" | sed -n 's/.*mountport=\([0-9]*\).*/\1/p')
read lockd_port statd_port < /run/nfs/guest-ports || fail "no guest-ports in the export"

echo "--- rpcbind, lockd on $lockd_port and rpc.statd on $statd_port in the guest"
echo "$lockd_port" > /proc/sys/fs/nfs/nlm_tcpport || fail "nlm_tcpport"
echo "$lockd_port" > /proc/sys/fs/nfs/nlm_udpport || fail "nlm_udpport"
mkdir -p /run/rpcbind /dev/shm/statd/sm /dev/shm/statd/sm.bak
chown -R statd /dev/shm/statd || fail "no statd user"
rpcbind -w || fail "rpcbind"
rpc.statd -P /dev/shm/statd --no-notify -p "$statd_port" || fail "rpc.statd"
M=/dev/shm/m
mkdir -p $M
opts=vers=3,proto=tcp,port=$port,mountport=$mport,mountproto=tcp,lock,lookupcache=none,actimeo=0
echo "--- mount -t nfs -o $opts $src $M"
mount -t nfs -o $opts $src $M || fail "mount with lock"
grep " $M " /proc/mounts
cd $M

waitfor() { # waitfor FILE: the host test's signal
  for i in $(seq 1200); do [ -e "$1" ] && return 0; sleep 0.05; done
  fail "no $1 from the host"
}
lockf_nb() { # lockf_nb FILE START LEN: a non-blocking fcntl write lock
  python3 -c 'import fcntl,sys
f=open(sys.argv[1],"r+")
fcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB, int(sys.argv[3]), int(sys.argv[2]))' "$@" 2>/dev/null
}
# --- end of nlm-setup.sh
