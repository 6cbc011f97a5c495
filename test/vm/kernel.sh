# kernel.sh - the kernel fabric (fabric/kernel) against the VM's rdma_cm:
# Go<->Go and Go<->rdma-core (ucmatose, udaddy, mckey) on rxe0 (RoCEv2),
# what siw0 (iWARP) allows without a QP, synchronous ids, and a
# cmtime-like timing next to rdma-core's cmtime, all QP-less (kcheck); the
# package's device tests, the data path's included. The Go examples with
# real QPs against rdma-core's are kernel-verbs.sh. Needs kcheck (built from
# test/kcheck) and kernel.test (go test -c ./fabric/kernel)
# in /extra. Run by scripts/interop-kernel.sh.
. /tests/lib.sh
N=${KBENCH_N:-100}
export PAIR_DELAY=${PAIR_DELAY:-1}

single kernel-nodev 10 "kcheck nodev"
single kernel-devices 10 "kcheck devices | tee /tmp/devs; grep -q 'device rxe0 .*transport InfiniBand netdev dummy0 .*10.0.0.1' /tmp/devs && grep -q 'device siw0 .*transport iWARP netdev dummy1 .*10.0.1.1' /tmp/devs"
single kernel-errors 20 "kcheck errors -b $RXE_IP"
# The package's own device suite (RC, reject, UD, multicast, channel
# semantics, reactor, synchronous ids; the data path on rxe0 and siw0) in
# one process.
if [ -x /extra/kernel.test ]; then
	single go-test-device 150 "kernel.test -test.run '^(TestDevice|TestDeviceVerbs|TestDeviceVerbsSync|TestDeviceSharedCQ|TestChannelSelection|TestMigrateListenerQueuedRequest|TestMigrateQueuedEventReactor)\$' -test.v -test.timeout 140s"
fi
# The same under the race detector (a dynamic binary: the VM has glibc).
if [ -x /extra/kernel.race.test ]; then
	single go-test-device-race 200 "kernel.race.test -test.run '^(TestDevice|TestDeviceVerbs|TestDeviceVerbsSync|TestDeviceSharedCQ|TestMigrateListenerQueuedRequest|TestMigrateQueuedEventReactor)\$' -test.v -test.timeout 190s"
fi

# RC, QP-less: the active side sees CONNECT_RESPONSE and establishes.
pair go-go-rc 30 "kcheck server -b $RXE_IP" "kcheck client -s $RXE_IP"
pair go-go-rc-clientdisc 30 "kcheck server -b $RXE_IP -disc client" "kcheck client -s $RXE_IP -disc client"
pair go-go-reject 30 "kcheck server -b $RXE_IP -reject" "kcheck client -s $RXE_IP -expect rejected -status 28"
single go-nolistener 20 "kcheck client -s $RXE_IP -p 7999 -expect rejected -status 8"
single go-sync 30 "kcheck sync -b $RXE_IP -p 7480"

# The pre-AF_IB commands (BIND_IP, RESOLVE_IP, QUERY_ROUTE, JOIN_IP_MCAST),
# which the fabric falls back to on kernels older than 3.11.
pair go-go-rc-ipcmds 30 "kcheck server -b $RXE_IP -noafib" "kcheck client -s $RXE_IP -noafib"
pair go-go-ud-ipcmds 30 "kcheck server -b $RXE_IP -p 7174 -ps udp -noafib" "kcheck client -s $RXE_IP -p 7174 -ps udp -noafib"
single go-join-ipcmds 20 "kcheck join -b $RXE_IP -m 239.1.1.3 -noafib"
single kernel-errors-ipcmds 20 "kcheck errors -b $RXE_IP -noafib"

# Against librdmacm (ucmatose with real QPs, no messages).
pair go-client-ucmatose 30 "ucmatose -b $RXE_IP -C 0" "kcheck client -s $RXE_IP"
pair ucmatose-go-server 30 "kcheck server -b $RXE_IP" "ucmatose -s $RXE_IP -C 0"
pair ucmatose-go-reject 30 "kcheck server -b $RXE_IP -reject" "ucmatose -s $RXE_IP -C 0" 28

# UD over SIDR. A SIDR reject is UNREACHABLE with status 2 (IB_SIDR_REJECT).
pair go-go-ud 30 "kcheck server -b $RXE_IP -p 7174 -ps udp" "kcheck client -s $RXE_IP -p 7174 -ps udp"
pair go-go-ud-reject 30 "kcheck server -b $RXE_IP -p 7174 -ps udp -reject" "kcheck client -s $RXE_IP -p 7174 -ps udp -expect unreachable -status 2"
pair go-client-udaddy 30 "udaddy -b $RXE_IP -C 0" "kcheck client -s $RXE_IP -p 7174 -ps udp"
pair udaddy-go-server 30 "kcheck server -b $RXE_IP -p 7174 -ps udp" "udaddy -s $RXE_IP -C 0"
pair udaddy-go-reject 30 "kcheck server -b $RXE_IP -p 7174 -ps udp -reject" "udaddy -s $RXE_IP -C 0" 2

# Multicast: Go holds a join while mckey joins the same group and sends.
pair go-mckey-join 30 "kcheck join -b $RXE_IP -m 239.1.1.1 -hold 3s" "mckey -m 239.1.1.1 -b $RXE_IP -s -C 10"
single go-mckey-same-mgid 5 "grep -q 'dgid ::ffff:239.1.1.1' /tmp/srv.out && grep -q 'joined dgid: ::ffff:239.1.1.1' /tmp/cli.out"
single go-join-sendonly 20 "kcheck join -b $RXE_IP -m 239.1.1.2 -sendonly"

# iWARP needs a real QP to connect or accept (iw_cm looks it up by number):
# without one the kernel answers EINVAL. Requests still arrive, and an MPA
# reject reaches librdmacm as REJECTED -104 (-ECONNRESET; exit status 152).
single go-siw-connect-noqp 20 "kcheck client -s $SIW_IP -p 7999 -expect connect-einval"
pair siw-ucmatose-go-noqp 20 "kcheck server -b $SIW_IP -expect accept-einval" "ucmatose -s $SIW_IP -C 0" 152
pair siw-ucmatose-go-reject 20 "kcheck server -b $SIW_IP -reject" "ucmatose -s $SIW_IP -C 0" 152

# Timing: N QP-less connections Go<->Go, then rdma-core's cmtime (real QPs).
pair go-bench-c$N 120 "kcheck bench-server -b $RXE_IP -p 7490 -c $N -t 110s" "kcheck bench-client -s $RXE_IP -p 7490 -c $N -t 110s"
if [ -z "${KBENCH_SKIP_CMTIME:-}" ]; then
	PERSIST=1 pair cmtime-c$N 120 "cmtime -b $RXE_IP -p 7491 -c $N" "cmtime -s $RXE_IP -p 7491 -c $N"
fi
summary
