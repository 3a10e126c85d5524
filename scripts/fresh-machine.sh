#!/usr/bin/env bash
# fresh-machine.sh runs a command (default: make test) as on a machine that
# never ran envd or its tests: in a mount namespace of its own, the homes of
# root and of the sandbox user, /tmp, and Go's build, test and module caches
# are new and empty, and the kernel's page cache is dropped first, so nothing
# an earlier run warmed or left is there. What scripts/install-deps.sh puts
# in a home (caches it builds for the image) it builds again, in the new one.
# The machine's packages stay: a cold sandbox has them too.
#
#   scripts/fresh-machine.sh [COMMAND...]
#
#   FRESH_DROP_CACHES  drop the page cache first (default 1; needs root; it
#                      slows other work on the machine for a while, nothing
#                      else)
#   FRESH_GO_CACHES    new Go build, test and module caches too (default 1;
#                      0 keeps the machine's: a fresh sandbox has no Go, and
#                      a rebuild of everything with -race costs minutes)
#   FRESH_KEEP         keep the fresh homes and caches' directory afterwards
#                      (default 0): its path is printed
#
# Needs root (mount namespaces). Run it from the checkout to test (a fresh
# clone is the honest one: git clone . /tmp/x && /tmp/x/scripts/...).
set -euo pipefail
export PATH=/usr/local/go/bin:$PATH

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 0
fi
[[ $(id -u) == 0 ]] || {
	echo "fresh-machine: needs root (it mounts new homes in a mount namespace)" >&2
	exit 2
}
if [[ $# == 0 ]]; then set -- make test; fi

if [[ -z ${FRESH_INSIDE:-} ]]; then
	scratch=$(mktemp -d /var/tmp/envd-fresh.XXXXXX)
	if [[ ${FRESH_KEEP:-0} == 1 ]]; then
		echo "fresh-machine: fresh homes and caches in $scratch (kept)"
	else
		trap 'rm -rf "$scratch"' EXIT
	fi
	if [[ ${FRESH_DROP_CACHES:-1} == 1 ]]; then
		sync
		echo 3 >/proc/sys/vm/drop_caches
	fi
	status=0
	OUTER_GOCACHE=$(go env GOCACHE) OUTER_GOMODCACHE=$(go env GOMODCACHE) \
		FRESH_INSIDE=$scratch unshare --mount --propagation private -- "$0" "$@" || status=$?
	exit "$status"
fi

# Inside the namespace: nothing mounted here is seen outside it.
scratch=$FRESH_INSIDE
user=${ENVD_SANDBOX_USER:-user}

fresh_dir() { # fresh_dir DIR [OWNER]: an empty DIR, seen only in here
	local dir=$1 owner=${2:-root} src=$scratch/${1//\//_}
	mkdir -p "$src" "$dir"
	chown "$owner:" "$src"
	chmod --reference="$dir" "$src" 2>/dev/null || true
	mount --bind "$src" "$dir"
}

# root's home keeps the machine's configuration (registries, git identity,
# go env), none of its caches.
keep=()
for f in .npmrc .gitconfig .bashrc .profile .config/go/env; do
	if [[ -f /root/$f ]]; then keep+=("$f"); fi
done
tar -C /root -cf "$scratch/root-config.tar" "${keep[@]}" 2>/dev/null || true
if [[ ${FRESH_GO_CACHES:-1} != 1 ]]; then
	# The machine's Go caches may live in the old /root: keep them in view.
	mkdir -p "$scratch/go-kept/cache" "$scratch/go-kept/mod" "${OUTER_GOCACHE:?}" "${OUTER_GOMODCACHE:?}"
	mount --bind "$OUTER_GOCACHE" "$scratch/go-kept/cache"
	mount --bind "$OUTER_GOMODCACHE" "$scratch/go-kept/mod"
fi
root_mode=$(stat -c %a /root)
fresh_dir /root
cp -a /etc/skel/. /root/ 2>/dev/null || true
chmod "$root_mode" /root # cp -a gave it skel's mode
tar -C /root -xf "$scratch/root-config.tar"
if home=$(getent passwd "$user" | cut -d: -f6) && [[ -n $home && -d $home ]]; then
	home_mode=$(stat -c %a "$home")
	fresh_dir "$home" "$user"
	cp -a /etc/skel/. "$home/" 2>/dev/null || true
	chmod "$home_mode" "$home"
	chown -R "$user:" "$home"
fi
mkdir -p "$scratch/tmp"
chmod 1777 "$scratch/tmp"
tmp=/tmp
if [[ $PWD == /tmp || $PWD == /tmp/* ]]; then
	# A new /tmp would hide the checkout: a new TMPDIR instead.
	export TMPDIR=$scratch/tmp
	tmp="TMPDIR ($TMPDIR)"
else
	mount --bind "$scratch/tmp" /tmp
fi
go_caches="Go's caches kept"
if [[ ${FRESH_GO_CACHES:-1} == 1 ]]; then
	mkdir -p "$scratch/go/cache" "$scratch/go/mod"
	export GOCACHE=$scratch/go/cache GOMODCACHE=$scratch/go/mod
	go_caches="new GOCACHE and GOMODCACHE"
else
	# Back at the paths they have outside (under the new /root, when they
	# were in the old one): Go keys a compiled package by its source's
	# path, so a module cache seen at another path rebuilds every
	# dependency (buf and staticcheck among them) on every run.
	mkdir -p "$OUTER_GOCACHE" "$OUTER_GOMODCACHE"
	mount --bind "$scratch/go-kept/cache" "$OUTER_GOCACHE"
	mount --bind "$scratch/go-kept/mod" "$OUTER_GOMODCACHE"
	export GOCACHE=$OUTER_GOCACHE GOMODCACHE=$OUTER_GOMODCACHE
fi
export HOME=/root
unset XDG_CACHE_HOME XDG_CONFIG_HOME XDG_DATA_HOME XDG_RUNTIME_DIR JUPYTER_RUNTIME_DIR JUPYTER_DATA_DIR DENO_DIR

echo "fresh-machine: new /root, ${home:-no sandbox user home} and $tmp, $go_caches; running: $*"
exec "$@"
