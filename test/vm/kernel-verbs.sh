# kernel-verbs.sh - the kernel fabric's data path (pure-Go verbs, cmrt's
# rxe and siw providers) against rdma-core's C tools, in the test VM.
#
# Runs inside the VM (run.sh -d DIR, DIR holding the static Go examples as
# go-<name>): each Go example with CMRT_FABRIC=kernel against its C
# counterpart, in both roles, with real QPs, and checks the messages
# (counted lines of the programs' output). Run by scripts/interop-kernel.sh.
#
# Env: KV_CMTIME_N (cmtime connections, 50: siw allows 71 QPs per
# process), KV_SKIP_BENCH=1 (no cmtime).
. /tests/lib.sh
. /extra/pairs.sh
export CMRT_FABRIC=kernel
export PAIR_DELAY=${PAIR_DELAY:-1}
CMN=${KV_CMTIME_N:-50}

# uc DEV ADDR NAME ARGS...: ucmatose, C server with a Go client and back.
uc() {
	uc_d=$1 uc_a=$2 uc_t=ucmatose-$1-$3; shift 3
	pairr "$uc_t-csrv-gocli" 120 "ucmatose -b $uc_a $*" "go-ucmatose -s $uc_a $*"
	count "$uc_t-csrv-gocli-out" /tmp/cli.out "data transfers complete" 1
	pairr "$uc_t-gosrv-ccli" 120 "go-ucmatose -b $uc_a $*" "ucmatose -s $uc_a $*"
	count "$uc_t-gosrv-ccli-out" /tmp/srv.out "data transfers complete" 1
}

# rp DEV ADDR NAME N ARGS...: rping -v, N pings checked line by line on the
# client (its pings) and on the server (the data it read).
rp() {
	rp_d=$1 rp_a=$2 rp_t=rping-$1-$3 rp_n=$4; shift 4
	pairr "$rp_t-csrv-gocli" 120 "rping -s -a $rp_a -C $rp_n -v $*" "go-rping -c -a $rp_a -C $rp_n -v -V $*"
	count "$rp_t-csrv-gocli-pings" /tmp/cli.out "ping data: rdma-ping-" "$rp_n"
	count "$rp_t-csrv-gocli-reads" /tmp/srv.out "server ping data: rdma-ping-" "$rp_n"
	pairr "$rp_t-gosrv-ccli" 120 "go-rping -s -a $rp_a -C $rp_n -v $*" "rping -c -a $rp_a -C $rp_n -v -V $*"
	count "$rp_t-gosrv-ccli-pings" /tmp/cli.out "ping data: rdma-ping-" "$rp_n"
	count "$rp_t-gosrv-ccli-reads" /tmp/srv.out "server ping data: rdma-ping-" "$rp_n"
}

# rd DEV ADDR: rdma_server and rdma_client (synchronous ids, inline sends).
rd() {
	pair "rdma-$1-csrv-gocli" 60 "rdma_server -s $2" "go-rdma_client -s $2"
	count "rdma-$1-csrv-gocli-out" /tmp/cli.out "rdma_client: end 0" 1
	pair "rdma-$1-gosrv-ccli" 60 "go-rdma_server -s $2" "rdma_client -s $2"
	count "rdma-$1-gosrv-ccli-out" /tmp/srv.out "rdma_server: end 0" 1
}

for kv_dev in rxe siw; do
	if [ $kv_dev = rxe ]; then kv_ip=$RXE_IP; else kv_ip=$SIW_IP; fi
	uc $kv_dev $kv_ip default
	uc $kv_dev $kv_ip c4-C10 -c 4 -C 10
	uc $kv_dev $kv_ip S1000 -S 1000
	rp $kv_dev $kv_ip default 10
	# rdma-core's rping takes at most 64 KiB - 1 bytes.
	rp $kv_dev $kv_ip S65535 10 -S 65535
	rd $kv_dev $kv_ip
done

# UD over SIDR on rxe (siw has no UD): 10 messages each way.
pair udaddy-rxe-csrv-gocli 60 "udaddy -b $RXE_IP" "go-udaddy -s $RXE_IP"
count udaddy-rxe-csrv-gocli-out /tmp/cli.out "data transfers complete" 1
count udaddy-rxe-csrv-gocli-srv /tmp/srv.out "data transfers complete" 1
pair udaddy-rxe-gosrv-ccli 60 "go-udaddy -b $RXE_IP" "udaddy -s $RXE_IP"
count udaddy-rxe-gosrv-ccli-out /tmp/srv.out "data transfers complete" 1
count udaddy-rxe-gosrv-ccli-cli /tmp/cli.out "data transfers complete" 1

# Multicast on rxe: the receiver joins first and counts 10 messages.
pair mckey-rxe-crecv-gosend 60 "mckey -m 239.1.2.1 -b $RXE_IP" "go-mckey -m 239.1.2.1 -b $RXE_IP -s"
count mckey-rxe-crecv-gosend-out /tmp/srv.out "data transfers complete" 1
pair mckey-rxe-gorecv-csend 60 "go-mckey -m 239.1.2.2 -b $RXE_IP" "mckey -m 239.1.2.2 -b $RXE_IP -s"
count mckey-rxe-gorecv-csend-out /tmp/srv.out "data transfers complete" 1

if [ -z "${KV_SKIP_BENCH:-}" ]; then
	# cmtime with QPs, same counts: rdma-core's (v44: one test, its server
	# never exits) and cmrt's (-O 0: one test, like it), each against
	# itself and against the other; every connection is made and the step
	# table printed. (test/vm/kernel-bench.sh times them.)
	PERSIST=1 pair cmtime-rxe-c-c 300 "cmtime -b $RXE_IP -p 7491 -c $CMN" "cmtime -s $RXE_IP -p 7491 -c $CMN"
	count cmtime-rxe-c-c-table /tmp/cli.out "connect      :" 1
	PERSIST=1 pair cmtime-rxe-go-go 300 "go-cmtime -b $RXE_IP -p 7492 -O 0 -c $CMN" "go-cmtime -s $RXE_IP -p 7492 -O 0 -c $CMN"
	count cmtime-rxe-go-go-conns /tmp/cli.out "qp_conn  *$CMN\$" 1
	count cmtime-rxe-go-go-table /tmp/cli.out "cm connect " 1
	PERSIST=1 pair cmtime-rxe-csrv-gocli 300 "cmtime -b $RXE_IP -p 7493 -c $CMN" "go-cmtime -s $RXE_IP -p 7493 -O 0 -c $CMN"
	count cmtime-rxe-csrv-gocli-conns /tmp/cli.out "qp_conn  *$CMN\$" 1
	PERSIST=1 pair cmtime-rxe-gosrv-ccli 300 "go-cmtime -b $RXE_IP -p 7494 -O 0 -c $CMN" "cmtime -s $RXE_IP -p 7494 -c $CMN"
	count cmtime-rxe-gosrv-ccli-table /tmp/cli.out "connect      :" 1
	PERSIST=1 pair cmtime-siw-go-go 300 "go-cmtime -b $SIW_IP -p 7495 -O 0 -c $CMN" "go-cmtime -s $SIW_IP -p 7495 -O 0 -c $CMN"
	count cmtime-siw-go-go-conns /tmp/cli.out "qp_conn  *$CMN\$" 1
fi

echo
echo "=== kernel log"
dmesg | grep -i -e rxe -e siw | grep -v -e 'out-of-tree' -e 'module verification' -e iwpm -e 'speed is unknown' | tail -30
echo "# pairs run once more after a known race (pairs.sh): $RETRIES"
summary
