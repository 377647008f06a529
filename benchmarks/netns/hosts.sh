#!/usr/bin/env bash
# Emulated hosts for the benchmarks: network namespaces joined by a rate-limited link (needs root).
#
#   benchmarks/netns/hosts.sh up N RATE [DELAY]    e.g. up 2 1gbit, up 2 1gbit 5ms
#   benchmarks/netns/hosts.sh down                 idempotent: removes whatever `up` made
#   benchmarks/netns/hosts.sh show                 the hosts, their addresses and qdiscs
#
# `up` makes namespaces <P>h1..<P>hN (P = $BAGUA_NETNS_PREFIX, default "bg": bgh1, bgh2, ...), each
# with an interface eth0 at 10.77.0.<i>/24, plugged by a veth pair (<P>v<i> in the root namespace)
# into a bridge <P>br0 that has no address: the hosts reach each other and nothing else, and the
# root namespace gets no route into 10.77.0.0/24. Every host's egress is shaped to RATE by tbf, with
# netem's DELAY in front of it when DELAY is given, so traffic between two hosts sees the link
# while traffic inside one host (its loopback) does not. Run a process on host i with
#   ip netns exec bgh<i> env GLOO_SOCKET_IFNAME=eth0 COMMAND
# A kernel without sch_netem answers "Specified qdisc kind is unknown" to a DELAY: `up` then exits non-zero
# with tc's message and leaves nothing behind (benchmarks/launch.py falls back to
# benchmarks/delay_link.py). Another prefix gives a second, independent set of hosts (the tests use
# one of their own so they never touch a benchmark's). BAGUA_NETNS_CC=cubic (or bbr, reno) sets TCP's
# congestion control on the hosts' route; without it connections use the machine's default.
set -euo pipefail

usage() {
  sed -n '3,6p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

die() {
  echo "hosts.sh: $*" >&2
  exit 1
}

prefix=${BAGUA_NETNS_PREFIX:-bg}
# Interface names are at most 15 bytes: the prefix plus "v" and a host number (up to 3 digits) fits.
[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] ||
  die "BAGUA_NETNS_PREFIX must be 1-8 lower-case letters or digits starting with a letter, got '$prefix'"
bridge=${prefix}br0
subnet=10.77.0
cc=${BAGUA_NETNS_CC:-}
[[ -z $cc || $cc =~ ^[a-z0-9_]+$ ]] || die "BAGUA_NETNS_CC must name a congestion control such as cubic or bbr, got '$cc'"

require_tools() {
  local tool
  for tool in ip tc; do
    command -v "$tool" >/dev/null 2>&1 ||
      die "'$tool' not found on PATH: install iproute2 (apt-get install iproute2)"
  done
  ((EUID == 0)) ||
    die "needs root to create network namespaces and qdiscs: run it as root (sudo $0 ...)"
}

our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}h[0-9]+$" || true
}

down() {
  local ns
  for ns in $(our_namespaces); do
    ip netns del "$ns" 2>/dev/null || true  # takes eth0 with it, and so its veth peer
  done
  local veth
  for veth in $(ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' |
    grep -E "^${prefix}v[0-9]+$" || true); do
    ip link del "$veth" 2>/dev/null || true  # a veth whose namespace was deleted by hand
  done
  ip link del "$bridge" 2>/dev/null || true
}

up() {
  local hosts=$1 rate=$2 delay=${3:-0ms}
  [[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 254)) ||
    die "N (the number of hosts) must be an integer from 1 to 254, got '$hosts'"
  [[ $rate =~ ^[0-9.]+[kmg]?(bit|bps)$ ]] ||
    die "RATE must be a tc rate such as 100mbit, 1gbit or 10gbit, got '$rate'"
  [[ $delay =~ ^[0-9.]+(us|ms|s)$ ]] || die "DELAY must look like 5ms, 250us or 0.01s, got '$delay'"
  down
  # A failure half-way leaves nothing behind; tc's own message stays on stderr for the caller.
  trap 'status=$?; down; exit $status' ERR
  ip link add "$bridge" type bridge
  ip link set "$bridge" up
  local i ns
  for ((i = 1; i <= hosts; i++)); do
    ns=${prefix}h$i
    ip netns add "$ns"
    ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
    ip link set "${prefix}v$i" master "$bridge" up
    ip -n "$ns" addr add "$subnet.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # TCP's congestion control between the hosts: the machine's default unless BAGUA_NETNS_CC names one
    # (set on the hosts' route: a namespace may only select the controls the root namespace allows)
    if [[ -n $cc ]]; then
      ip -n "$ns" route replace "$subnet.0/24" dev eth0 proto kernel scope link src "$subnet.$i" congctl "$cc"
    fi
    # burst 256kb holds a few ms of traffic at 1 Gbit/s and is well above rate/HZ at 10 Gbit/s.
    if [[ $delay =~ ^0+(\.0*)?(us|ms|s)$ ]]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: tbf rate "$rate" burst 256kb latency 100ms
    else
      ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "$delay"
      ip netns exec "$ns" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "$rate" burst 256kb latency 100ms
    fi
  done
  trap - ERR
  echo "hosts ${prefix}h1..${prefix}h$hosts at $subnet.1..$hosts, link $rate, delay $delay"
}

show() {
  local ns
  for ns in $(our_namespaces); do
    echo "$ns: $(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}')"
    ip netns exec "$ns" tc qdisc show dev eth0 | sed 's/^/  /'
  done
}

case ${1:-} in
  up)
    (($# >= 3 && $# <= 4)) || usage
    require_tools
    up "$2" "$3" "${4:-0ms}"
    ;;
  down)
    (($# <= 2)) || usage  # an N after `down` is accepted and not needed
    require_tools
    down
    ;;
  show)
    require_tools
    show
    ;;
  *) usage ;;
esac
