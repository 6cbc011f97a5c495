# rsocket.sh - interop of cmrt's rsocket package with librdmacm's rsockets.
#
# Runs inside the test VM (run.sh -d DIR with DIR holding the static Go
# binaries go-rstream and go-riostream): Go rstream against rdma-core's C
# rstream and Go riostream against C riostream, both roles, on siw0's
# address, at 64 B, 4 KiB, 64 KiB and 1 MiB, with data verification (-T v,
# common.c's byte pattern checked on every receive). The Go side runs on
# the software fabric (iWARP on a plain TCP socket, siw the kernel peer)
# unless CMRT_FABRIC names another one: with CMRT_FABRIC=kernel the same
# tests run the Go side on the kernel fabric (once it has a data path), and
# RSOCKET_IP=$RXE_IP moves them to rxe0. RSOCKET_C_BASELINE=1 first runs
# C against C for reference. Run by scripts/interop-rsocket.sh.
. /tests/lib.sh

ip=${RSOCKET_IP:-$SIW_IP}
fab=${CMRT_FABRIC:-soft}
# The C programs busy-poll; TCG is slow: few iterations at large sizes.
sizes=${RSOCKET_SIZES:-"64:200 4096:100 65536:20 1048576:4"}

# ok NAME FILE: a result line ("custom ...") and no verification failure.
ok() {
	if grep -q '^custom ' "$2" && ! grep -q 'verification failed' "$2"; then
		result "$1" 0
	else
		result "$1" 1
	fi
}

# both PROG SIZE COUNT: the C server with a Go client, then the Go server
# with a C client; each side checks the data.
both() {
	b_p=$1 b_s=$2 b_c=$3
	b_t=$b_p-$fab-S$b_s-C$b_c
	b_args="-S $b_s -C $b_c -T v"
	pair "$b_t-csrv-gocli" 180 "$b_p -b $ip $b_args" "go-$b_p -s $ip $b_args"
	ok "$b_t-csrv-gocli-cli-data" /tmp/cli.out
	ok "$b_t-csrv-gocli-srv-data" /tmp/srv.out
	pair "$b_t-gosrv-ccli" 180 "go-$b_p -b $ip $b_args" "$b_p -s $ip $b_args"
	ok "$b_t-gosrv-ccli-cli-data" /tmp/cli.out
	ok "$b_t-gosrv-ccli-srv-data" /tmp/srv.out
}

if [ -n "${RSOCKET_C_BASELINE:-}" ]; then
	for prog in rstream riostream; do
		pair "$prog-c-c-baseline" 120 "$prog -b $ip -S 4096 -C 20 -T v" "$prog -s $ip -S 4096 -C 20 -T v"
	done
fi

for sc in $sizes; do
	both rstream "${sc%%:*}" "${sc##*:}"
done
for sc in $sizes; do
	both riostream "${sc%%:*}" "${sc##*:}"
done
# Several iterations on one connection (-I), and rstream's own defaults
# for the buffer and inline sizes of its bandwidth test (-i 0).
pair "rstream-$fab-I5-csrv-gocli" 180 "rstream -b $ip -S 10000 -C 10 -I 5 -i 0 -T v" "go-rstream -s $ip -S 10000 -C 10 -I 5 -i 0 -T v"
ok "rstream-$fab-I5-csrv-gocli-data" /tmp/cli.out
pair "rstream-$fab-I5-gosrv-ccli" 180 "go-rstream -b $ip -S 10000 -C 10 -I 5 -i 0 -T v" "rstream -s $ip -S 10000 -C 10 -I 5 -i 0 -T v"
ok "rstream-$fab-I5-gosrv-ccli-data" /tmp/srv.out

echo
echo "=== siw kernel log"
dmesg | grep -i 'siw' | grep -v -e 'out-of-tree' -e 'module verification' -e iwpm
bad=$(dmesg | grep -c -i -e 'siw.*TERMINATE' -e 'siw.*crc error' -e 'siw.*extra data' -e 'siw.*bogus')
echo "# siw protocol complaints: $bad"
result siw-log-clean "$bad" 0
summary
