# Runs in the Linux guest after nlm-setup.sh (TestLinuxClientNLM): exclusion
# with a Go NLM client and a local process on the server, then rounds of a
# blocked flock that the server grants by its GRANTED callback into the guest.

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
for i in range(1200):
    if os.path.exists("release"): break
    time.sleep(0.05)
else: raise SystemExit("no release from the host")' || fail "holding guest.lock"

rounds=$(cat rounds)
echo "--- $rounds rounds: the guest waits for wait.lock, which the Go client holds and then releases"
python3 -c 'import fcntl,os,socket,sys,time
def waitfor(name):
    for i in range(2400):
        if os.path.exists(name): return
        time.sleep(0.05)
    raise SystemExit("no %s from the host" % name)
# The host test times each grant by this connection (its clock, not ours):
# one byte as soon as flock returns.
s = socket.create_connection(("10.0.2.2", int(open("grant-port").read())))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for i in range(1, int(sys.argv[1]) + 1):
    waitfor("go.%d" % i)
    f = open("wait.lock", "r+")
    open("waiting.%d" % i, "w").close()
    t0 = time.time()
    fcntl.flock(f, fcntl.LOCK_EX)    # blocked until the host unlocks
    s.sendall(b"g")
    t = time.time()
    f.close()                        # the unlock
    open("released.%d" % i, "w").close()
    print("round %d: wait.lock granted after %.3f s of waiting" % (i, t - t0))
' "$rounds" || fail "waiting for wait.lock"
cd /
umount $M || fail "umount"
echo "--- all checks passed"
