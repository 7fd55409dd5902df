#!/usr/bin/env bash
# Cached Debian chroots for CI (the package install test and the Debian 13
# user-space suite in tests/distro/run.sh).
#
#   tests/distro/chroot.sh ensure NAME...   build the chroots that are missing
#   tests/distro/chroot.sh path NAME        print a chroot's directory
#   tests/distro/chroot.sh list             the chroots this script knows
#
# NAME is one of
#   bookworm      Debian 12, debootstrap --variant=minbase; ibverbs-utils
#                 downloaded into apt's cache, not installed (the install
#                 test adds it offline after the package)
#   trixie        Debian 13, the same
#   trixie-rdma   trixie plus Debian 13's RDMA user space: rdma-core 56
#                 (ibverbs-utils, rdmacm-utils, python3-pyverbs and its
#                 test suite, iproute2's rdma), perftest 25.01, UCX 1.18,
#                 Open MPI 5 with mpicc
#
# Chroots live in $SOFTRDMA_CI_CACHE (default /var/cache/softrdma-ci), outside
# any clone, and are never modified after they are built: runs work on an
# overlay above them (tests/distro/run.sh). One is rebuilt when it is missing
# or its recipe changed (a stamp file records suite, mirror and packages).
# The mirror is the Debian archive this machine's apt uses
# (/etc/apt/sources.list*), or $SOFTRDMA_CI_MIRROR. Needs root and debootstrap.
set -euo pipefail

CACHE=${SOFTRDMA_CI_CACHE:-/var/cache/softrdma-ci}
# What the Debian 13 suite runs (tests/distro/run.sh): keep in step.
TRIXIE_RDMA_PKGS=(ibverbs-utils rdmacm-utils perftest infiniband-diags iproute2
                  python3-pyverbs ucx-utils openmpi-bin libopenmpi-dev gcc libc6-dev
                  libibverbs-dev librdmacm-dev procps)
# Downloaded (not installed) into the base chroots' apt cache.
BASE_DOWNLOADS=(ibverbs-utils)

say() { echo "[chroot $(date +%H:%M:%S)] $*" >&2; }
die() { echo "chroot.sh: $*" >&2; exit 1; }

# The Debian archive apt uses here: the URI serving the host's release
# (not -security, not a third-party repository).
mirror() {
  if [ -n "${SOFTRDMA_CI_MIRROR:-}" ]; then echo "$SOFTRDMA_CI_MIRROR"; return; fi
  local f uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    # one-line format: deb [opts] URI SUITE COMPONENTS...
    uri=$(sed -n 's/^deb \(\[[^]]*\] \)\?\([a-z]*:\/\/[^ ]*\) \([a-z]*\) .*/\2 \3/p' "$f" \
          | awk '$2 !~ /-/ && $1 ~ /\/debian\/?$/ {print $1; exit}')
    # deb822: URIs: ... / Suites: ...
    [ -n "$uri" ] || uri=$(awk '
        /^URIs:/ {u=$2} /^Suites:/ {s=$0}
        /^$/ {if (u ~ /\/debian\/?$/ && s !~ /security/) {print u; exit} u=""; s=""}
        END {if (u ~ /\/debian\/?$/ && s !~ /security/) print u}' "$f" | head -1)
    if [ -n "$uri" ]; then echo "${uri%/}"; return; fi
  done
  echo http://deb.debian.org/debian
}

suite_of() {
  case $1 in
    bookworm) echo bookworm ;;
    trixie | trixie-rdma) echo trixie ;;
    *) die "unknown chroot $1 (bookworm, trixie, trixie-rdma)" ;;
  esac
}

recipe() { # NAME: what the stamp records
  echo "suite=$(suite_of "$1") mirror=$(mirror) variant=minbase downloads=${BASE_DOWNLOADS[*]}"
  [ "$1" = trixie-rdma ] && echo "packages=${TRIXIE_RDMA_PKGS[*]}"
  return 0
}

path() { echo "$CACHE/$1"; }

fresh() { # NAME: built with the current recipe?
  [ -f "$CACHE/$1.stamp" ] && [ -d "$CACHE/$1" ] && [ "$(cat "$CACHE/$1.stamp")" = "$(recipe "$1")" ]
}

# Runs CMD in chroot DIR with /proc, /sys, /dev (private mounts, gone when
# it returns) and the host's resolver.
in_chroot() { # DIR CMD...
  local dir=$1; shift
  cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
  unshare --mount --propagation private -- bash -c '
    d=$1; shift
    mount -t proc proc "$d/proc" && mount --rbind /sys "$d/sys" && mount --rbind /dev "$d/dev"
    exec chroot "$d" "$@"' _ "$dir" "$@"
}

build() { # NAME
  local name=$1 suite tmp t0=$SECONDS
  suite=$(suite_of "$name")
  command -v debootstrap >/dev/null || die "debootstrap missing (apt-get install debootstrap)"
  tmp="$CACHE/.$name.tmp"
  rm -rf "$tmp"
  if [ "$name" = trixie-rdma ]; then
    ensure trixie
    say "trixie-rdma: copying trixie"
    cp -a "$CACHE/trixie" "$tmp"
    say "trixie-rdma: apt-get install ${TRIXIE_RDMA_PKGS[*]}"
    in_chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${TRIXIE_RDMA_PKGS[@]}" >"$CACHE/$name.log" 2>&1 || { tail -30 "$CACHE/$name.log"; die "$name: apt-get install failed"; }
    in_chroot "$tmp" apt-get clean
  else
    say "$name: debootstrap --variant=minbase $suite $(mirror)"
    debootstrap --variant=minbase "$suite" "$tmp" "$(mirror)" >"$CACHE/$name.log" 2>&1 \
      || { tail -30 "$CACHE/$name.log"; die "$name: debootstrap failed"; }
    echo "deb $(mirror) $suite main" >"$tmp/etc/apt/sources.list"
    # No daemons may start inside (postinst scripts).
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod +x "$tmp/usr/sbin/policy-rc.d"
    in_chroot "$tmp" apt-get update -q >>"$CACHE/$name.log" 2>&1 || die "$name: apt-get update failed"
    in_chroot "$tmp" apt-get clean
    in_chroot "$tmp" apt-get install -q -y -d --no-install-recommends "${BASE_DOWNLOADS[@]}" \
      >>"$CACHE/$name.log" 2>&1 || die "$name: apt-get install -d ${BASE_DOWNLOADS[*]} failed"
  fi
  rm -rf "${CACHE:?}/$name"
  mv "$tmp" "$CACHE/$name"
  recipe "$name" >"$CACHE/$name.stamp"
  say "$name: built in $((SECONDS - t0)) s"
}

ensure() { # NAME...
  local n
  for n in "$@"; do
    fresh "$n" || build "$n"
  done
}

[ $# -ge 1 ] || die "usage: chroot.sh ensure NAME... | path NAME | list"
cmd=$1; shift
case $cmd in
  ensure)
    [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
    mkdir -p "$CACHE"
    # One builder at a time (parallel CI runs share the cache).
    exec 9>"$CACHE/.lock"
    flock 9
    ensure "$@" ;;
  path) path "$1" ;;
  mirror) mirror ;;
  list) echo bookworm trixie trixie-rdma ;;
  *) die "unknown command $cmd" ;;
esac
