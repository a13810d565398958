#!/usr/bin/env bash
# tools/fresh-machine-check.sh: runs README's main command and test command in a clean Debian 12 root (as root).
# Usage: sudo bash tools/fresh-machine-check.sh [--main-only | --test-only] [--cold] [--keep]
#   A minimal Debian 12 root (debootstrap --variant=minbase bookworm, from this machine's own apt source) is made once
#   and kept under MPT_FRESH_CACHE (default /var/cache/mptrain-fresh-machine). Each run copies it, clones this
#   repository's HEAD into /root/mptrain inside the copy (commit first: uncommitted changes are not tested), and runs
#   each README command there under chroot with /proc, /sys and /dev mounted. It prints one PASS/FAIL line per command
#   with its time; logs go to $MPT_FRESH_CACHE/logs. Mounts and the copy are removed at exit, also on failure.
#   --cold: no compiler cache (by default a ccache directory under the cache folder is reused between runs, which
#   changes build times, not what is tested). --keep: keep the root copy for inspection.
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
cache=${MPT_FRESH_CACHE:-/var/cache/mptrain-fresh-machine}
run_main=1 run_tests=1 cold=0 keep=0
for arg in "$@"; do
  case "$arg" in
    --main-only) run_tests=0 ;;
    --test-only) run_main=0 ;;
    --cold) cold=1 ;;
    --keep) keep=1 ;;
    *) echo "fresh-machine-check: unknown argument '$arg' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "fresh-machine-check: must run as root (debootstrap, chroot, mount)" >&2; exit 2; }
for tool in debootstrap chroot git; do
  command -v "$tool" >/dev/null || { echo "fresh-machine-check: needs $tool (apt-get install $tool)" >&2; exit 2; }
done

# The README command between <!-- NAME --> markers (the same extraction as .ci/run).
readme_command() {
  sed -n "/<!-- $1 -->/,/<!-- \/$1 -->/p" "$repo/README.md" | grep -v -e '^<!--' -e '^```'
}
main_command=$(readme_command main-command)
test_command=$(readme_command test-command)
[[ -n "$main_command" && -n "$test_command" ]] || { echo "fresh-machine-check: README commands not found" >&2; exit 2; }

# This machine's Debian mirror: the first URIs line of a deb822 source for bookworm, else sources.list.
mirror=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/debian\/?$/ && !/security/ {print $2; exit}')
[[ -n "$mirror" ]] || mirror=$(awk '/^deb .*bookworm/ && !/security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
[[ -n "$mirror" ]] || mirror=http://deb.debian.org/debian

mkdir -p "$cache/logs"
if [[ ! -x "$cache/root/bin/bash" ]]; then
  echo "fresh-machine-check: making a minimal Debian 12 root from $mirror (about a minute)"
  rm -rf "$cache/root.partial"
  debootstrap --variant=minbase bookworm "$cache/root.partial" "$mirror" > "$cache/logs/debootstrap.log" 2>&1 || {
    tail -20 "$cache/logs/debootstrap.log" >&2; echo "fresh-machine-check: debootstrap failed" >&2; exit 1; }
  mv "$cache/root.partial" "$cache/root"
fi

work=$(mktemp -d "$cache/run.XXXXXX")
root="$work/root"
mounts=()
cleanup() {
  local i
  for (( i = ${#mounts[@]} - 1; i >= 0; i-- )); do
    umount -R "${mounts[$i]}" 2>/dev/null || umount -R -l "${mounts[$i]}" 2>/dev/null || true
  done
  if [[ $keep -eq 1 ]]; then echo "fresh-machine-check: kept $root"; else rm -rf --one-file-system "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cp -a "$cache/root" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
commit=$(git -C "$repo" rev-parse HEAD)
[[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ]] ||
  echo "fresh-machine-check: the work tree has uncommitted changes; testing the commit $commit"
git clone -q --no-local "$repo" "$root/root/mptrain"
git -C "$root/root/mptrain" checkout -q "$commit"
for fs in proc sys dev; do
  mkdir -p "$root/$fs"
  case "$fs" in
    proc) mount -t proc proc "$root/proc" ;;
    sys) mount --rbind /sys "$root/sys"; mount --make-rslave "$root/sys" ;;
    dev) mount --rbind /dev "$root/dev"; mount --make-rslave "$root/dev" ;;
  esac
  mounts+=("$root/$fs")
done
if [[ $cold -eq 0 ]]; then
  mkdir -p "$cache/ccache" "$root/root/.cache/ccache"
  mount --bind "$cache/ccache" "$root/root/.cache/ccache"
  mounts+=("$root/root/.cache/ccache")
fi

status=0
run_in_root() {  # NAME COMMAND
  local name=$1 cmd=$2 log="$cache/logs/$1.log" start rc
  start=$(date +%s)
  set +e
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/mptrain && set -euo pipefail && $cmd" > "$log" 2>&1
  rc=$?
  set -e
  local took=$(( $(date +%s) - start ))
  if [[ $rc -eq 0 ]]; then
    echo "PASS  $name  ($(( took / 60 )) min $(( took % 60 )) s)  $cmd"
  else
    echo "FAIL  $name  ($(( took / 60 )) min $(( took % 60 )) s, exit $rc)  $cmd"
    tail -30 "$log" | sed 's/^/      | /'
    status=1
  fi
  echo "      log: $log"
}
echo "fresh-machine-check: commit $commit in a clean Debian 12 root ($(cat "$root/etc/debian_version"))"
[[ $run_main -eq 1 ]] && run_in_root main-command "$main_command"
[[ $run_tests -eq 1 ]] && run_in_root test-command "$test_command"
exit $status
