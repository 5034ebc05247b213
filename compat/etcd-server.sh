# etcd-server.sh, sourced by bash scripts that run a service against a real
# etcd server (.ci/consumers.sh, compat/observe.sh), defines
#   start_server VERSION  starts the server of that release (build-etcd.sh)
#                         on free loopback ports, with its data and log
#                         under $work; sets ETCD_ENDPOINTS and srvpid
#   stop_server           kills it and waits for it
# The caller owns $work and stops a server left running on exit.

start_server() {
	local bin port peer
	bin=$(sh "$(dirname "${BASH_SOURCE[0]}")/build-etcd.sh" "$1")
	port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
	peer=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
	"$bin" --name svc --data-dir "$work/srv-$1-$port" \
		--listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--initial-cluster "svc=http://127.0.0.1:$peer" >"$work/srv-$1-$port.log" 2>&1 &
	srvpid=$!
	export ETCD_ENDPOINTS="127.0.0.1:$port"
}

stop_server() {
	kill "$srvpid" 2>/dev/null || true
	wait "$srvpid" 2>/dev/null || true
	srvpid=
}
