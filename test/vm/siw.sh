# siw.sh - interop of cmrt's software fabric with the kernel's soft-iWARP.
#
# Runs inside the test VM (run.sh -d DIR with DIR holding the static Go
# binaries go-ucmatose, go-rping, go-rdma_server and go-rdma_client): each
# Go example against rdma-core's C program on siw0's address, in both
# roles. The Go side speaks iWARP on a plain TCP socket; siw is the kernel
# peer.
. /tests/lib.sh
. /extra/pairs.sh

# ucmatose: the C server with a Go client and the Go server with a C client.
uc() {
	uc_t=ucmatose-$1; shift
	pair "$uc_t-csrv-gocli" 120 "ucmatose -b $SIW_IP $*" "go-ucmatose -s $SIW_IP $*"
	count "$uc_t-csrv-gocli-out" /tmp/cli.out "data transfers complete" 1
	pair "$uc_t-gosrv-ccli" 120 "go-ucmatose -b $SIW_IP $*" "ucmatose -s $SIW_IP $*"
	count "$uc_t-gosrv-ccli-out" /tmp/srv.out "data transfers complete" 1
}

# rping with -v and -V on the C side too; N pings checked line by line.
rp() {
	rp_t=rping-$1 rp_n=$2; shift 2
	pairr "$rp_t-csrv-gocli" 120 "rping -s -a $SIW_IP -C $rp_n -v $*" "go-rping -c -a $SIW_IP -C $rp_n -v -V $*"
	count "$rp_t-csrv-gocli-pings" /tmp/cli.out "ping data: rdma-ping-" "$rp_n"
	count "$rp_t-csrv-gocli-reads" /tmp/srv.out "server ping data: rdma-ping-" "$rp_n"
	pairr "$rp_t-gosrv-ccli" 120 "go-rping -s -a $SIW_IP -C $rp_n -v $*" "rping -c -a $SIW_IP -C $rp_n -v -V $*"
	count "$rp_t-gosrv-ccli-pings" /tmp/cli.out "ping data: rdma-ping-" "$rp_n"
	count "$rp_t-gosrv-ccli-reads" /tmp/srv.out "server ping data: rdma-ping-" "$rp_n"
}

# rdma_server and rdma_client: rdma_getaddrinfo, rdma_create_ep (a passive
# endpoint's QP given by rdma_get_request), inline sends, on synchronous ids.
pair rdma-csrv-gocli 60 "rdma_server -s $SIW_IP" "go-rdma_client -s $SIW_IP"
count rdma-csrv-gocli-out /tmp/cli.out "rdma_client: end 0" 1
pair rdma-gosrv-ccli 60 "go-rdma_server -s $SIW_IP" "rdma_client -s $SIW_IP"
count rdma-gosrv-ccli-out /tmp/srv.out "rdma_server: end 0" 1

uc default
uc c4-C10 -c 4 -C 10
uc S100000-C5 -S 100000 -C 5 # several FPDUs per message
rp default 3
rp S65000 5 -S 65000

# MPA CRC32c asked for by the Go side (siw honours a C=1 request or reply).
export CMRT_SOFT_CRC=1
uc crc -C 20
rp crc 3
unset CMRT_SOFT_CRC

# Peer-to-peer mode: the Go initiator asks (with a Write RTR by default, so
# every Go client above runs in it), siw's responder picks the RTR; off is
# an initiator that asks for none, as siw's own.
for p2p_rtr in read off; do
	export CMRT_SOFT_P2P=$p2p_rtr
	pair "ucmatose-p2p-$p2p_rtr-csrv-gocli" 120 "ucmatose -b $SIW_IP" "go-ucmatose -s $SIW_IP"
	pair "rping-p2p-$p2p_rtr-csrv-gocli" 120 "rping -s -a $SIW_IP -C 3 -v" "go-rping -c -a $SIW_IP -C 3 -v -V"
	count "rping-p2p-$p2p_rtr-csrv-gocli-pings" /tmp/cli.out "ping data: rdma-ping-" 3
done
unset CMRT_SOFT_P2P

echo
echo "=== siw kernel log"
dmesg | grep -i 'siw' | grep -v -e 'out-of-tree' -e 'module verification' -e iwpm
bad=$(dmesg | grep -c -i -e 'siw.*TERMINATE' -e 'siw.*crc error' -e 'siw.*extra data' -e 'siw.*bogus')
echo "# siw protocol complaints: $bad"
result siw-log-clean "$bad" 0
echo "# pairs run once more after a known race (pairs.sh): $RETRIES"
summary
