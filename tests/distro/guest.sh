# Sourced inside the test chroots by tests/distro/run.sh (bash): helpers
# for programs run in pairs, server and client, in the chroot's own
# network namespace. Logs go to $LOG (a directory the host reads).
: "${LOG:=/ci/log}"
mkdir -p "$LOG"

# Whether TCP PORT listens (this network namespace).
tcp_listening() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v p="$hex" '$2 ~ p"$" && $4 == "0A" {f=1} END {exit !f}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Whether UDP ADDR:4791 is bound (a softrdma device opened there).
udp_bound() {
  local hex
  hex=$(printf '%02X%02X%02X%02X:12B7' $(echo "$1" | awk -F. '{print $4, $3, $2, $1}'))
  awk -v a="$hex" '$2 == a {f=1} END {exit !f}' /proc/net/udp 2>/dev/null
}

# wait_for SECONDS PID CMD...: until CMD succeeds; fails when PID exits
# first or the time is up.
wait_for() {
  local secs=$1 pid=$2; shift 2
  local n=$((secs * 20))
  while ((n-- > 0)); do
    "$@" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# pair NAME READY SERVER CLIENT: runs the shell command SERVER in the
# background, waits until READY (a command, e.g. "tcp_listening 18515")
# succeeds, runs CLIENT, then waits for the server. Both must exit 0
# (the client within 120 s, the server 60 s after it). Logs: $LOG/NAME-server.log, $LOG/NAME-client.log.
pair() {
  local name=$1 ready=$2 server=$3 client=$4 spid crc src
  bash -c "$server" >"$LOG/$name-server.log" 2>&1 &
  spid=$!
  if ! wait_for 60 "$spid" $ready; then
    echo "$name: the server never got ready ($ready)"; kill "$spid" 2>/dev/null
    wait "$spid"; cat "$LOG/$name-server.log"; return 1
  fi
  timeout 120 bash -c "$client" >"$LOG/$name-client.log" 2>&1
  crc=$?
  # The server ends by itself after a client that succeeded (within 60 s).
  local n=600
  [ "$crc" = 0 ] || n=0
  while kill -0 "$spid" 2>/dev/null && ((n-- > 0)); do sleep 0.1; done
  kill "$spid" 2>/dev/null
  wait "$spid"
  src=$?
  if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
    echo "$name: client exit $crc, server exit $src"
    echo "--- server"; cat "$LOG/$name-server.log"
    echo "--- client"; cat "$LOG/$name-client.log"
    return 1
  fi
  return 0
}
