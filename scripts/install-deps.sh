#!/usr/bin/env bash
# install-deps.sh: the one installer for envd's runtime and test dependencies.
#
# Used by `make run`, `make test`, `.ci/run` and the Dockerfile. Idempotent and
# fast on a machine that already has everything: each step checks first and
# only installs what is missing. Must run as root (apt, useradd, /etc/sudoers.d).
#
# What it installs:
#   - Debian packages: Jupyter server + ipykernel (Debian's /usr/bin/python3),
#     numpy/pandas/matplotlib, R + IRkernel, sudo, attr, curl, git, ... (see
#     APT_PKGS). ENVD_INSTALL_FULL=1 adds the larger data-science stack (see
#     APT_PKGS_FULL); the tools only tests use (APT_PKGS_TEST) come unless
#     ENVD_SKIP_COMPAT=1.
#   - Node.js + npm from Debian, only when `node`/`npm` are not on PATH.
#   - Deno (npm `deno@$DENO_VERSION`) into $ENVD_KERNELS_DIR, plus the Jupyter
#     kernelspec /usr/local/share/jupyter/kernels/deno/kernel.json.
#   - The account `user` (home /home/user, bash) with passwordless sudo.
#   - Where code installs packages (docs/packages.md, "Installing packages from code"):
#     the Python virtual environment /opt/envd-python (Debian's python3,
#     --system-site-packages) and R's site library /usr/local/lib/R/site-library,
#     both `user`'s and, through a default ACL, writable by `user` whoever
#     installs; /etc/profile.d/envd-python.sh keeps the venv first on a login
#     shell's PATH.
#   - npm dependencies of test/compat (`npm ci`), unless ENVD_SKIP_COMPAT=1.
#   - What kernels would otherwise build on their first use (see
#     install_kernel_caches): matplotlib's font cache in the homes of root
#     and `user`, and the Java kernel's agent compiled, with class data
#     archives for its JVMs, in /var/cache/envd/java-kernel.
#
#   scripts/install-deps.sh            everything above
#   scripts/install-deps.sh --caches   only the kernels' caches (the packages
#                                      must be there): e.g. in new, empty homes
#
# Environment knobs:
#   ENVD_INSTALL_FULL=1   also install the big data stack (the Dockerfile and `make test` set it)
#   ENVD_SKIP_COMPAT=1    skip what only the tests use: `npm ci` in test/compat and
#                         APT_PKGS_TEST (e.g. in a runtime image)
#   ENVD_SKIP_GO=1        do not install Go (a runtime image gets a built envd)
#   ENVD_KERNELS_DIR      where npm-installed kernels go (default /opt/envd-kernels)
#   ENVD_KERNELSPEC_DIR   kernelspec root (default /usr/local/share/jupyter/kernels)
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

readonly DENO_VERSION=2.9.6
readonly KERNELS_DIR=${ENVD_KERNELS_DIR:-/opt/envd-kernels}
readonly KERNELSPEC_DIR=${ENVD_KERNELSPEC_DIR:-/usr/local/share/jupyter/kernels}
readonly SANDBOX_USER=user
# Where code installs packages: envd's defaults.PythonVenv and defaults.RLibrary.
readonly PYTHON_VENV=/opt/envd-python
readonly R_LIBRARY=/usr/local/lib/R/site-library
readonly PROFILE_SNIPPET=/etc/profile.d/envd-python.sh
readonly REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The Java kernel's prebuilt agent: envd_java_kernel/kernel.py reads it there.
readonly JAVA_PREBUILT=/var/cache/envd/java-kernel
readonly JAVA_AGENT_SRC=$REPO_ROOT/internal/jupyter/startup/files/python/envd_java_kernel/EnvdJShell.java

APT_PKGS=(
	# Jupyter (always run with Debian's /usr/bin/python3)
	python3-jupyter-server python3-ipykernel python3-jupyter-client
	python3-numpy python3-pandas python3-matplotlib
	# R kernel (Debian ships the `ir` kernelspec)
	r-base-core r-cran-irkernel
	# daemon runtime: run-as-user, xattrs (file metadata), health checks, TLS roots
	sudo attr ca-certificates curl
	# tools the daemon and tests run: nice/ionice (util-linux), ps/pgrep (procps),
	# stty/whoami (coreutils), the user's login shell
	util-linux procps coreutils bash passwd
	openjdk-17-jdk-headless # envd's Java kernel runs on its jshell (jdk.jshell)
	# packages from code: the shared venv (python3 -m venv) and its ACLs (setfacl)
	python3-venv acl
	# What E2B's SDKs and sandbox users expect of a sandbox. E2B's template
	# provisioning installs systemd systemd-sysv openssh-server sudo chrony
	# linuxptp socat curl ca-certificates fuse3 iptables git into every
	# template; of those, a container image needs:
	#   git: the SDKs' sandbox.git runs git through commands
	#   socat: in every E2B sandbox (upstream's envd forwards ports with it;
	#     ours forwards in-process), and scripts written for E2B use it
	# and envd itself needs:
	#   nfs-common: mount.nfs, for /init's volumeMounts (it brings rpcbind)
	# The rest belong to a Firecracker guest, not to a container: systemd
	# and systemd-sysv (the guest's init; a container runs start-up.sh),
	# openssh-server (the guest's SSH access), chrony and linuxptp (the
	# guest's clock from the host's PTP device), fuse3 and iptables (they
	# need privileges a container does not have). E2B's provisioning adds
	# them when it turns an image into a guest (deploy/firecracker/README.md).
	git socat nfs-common
)
APT_PKGS_FULL=(
	python3-scipy python3-sklearn python3-seaborn python3-plotly
	python3-openpyxl python3-xlrd python3-requests python3-bs4 python3-pil
	python3-sympy python3-statsmodels python3-lxml python3-xlsxwriter
	python3-tabulate python3-networkx python3-docx python3-pypdf
	python3-reportlab python3-tqdm python3-yaml
	python3-nltk python3-opencv python3-skimage python3-xarray python3-aiohttp
	python3-gensim python3-soundfile python3-imageio python3-joblib
	python3-pytest python3-tz
	r-recommended r-cran-ggplot2 r-cran-dplyr r-cran-tidyr r-cran-readr
	r-cran-data.table
)
# Tools only the tests run; skipped with ENVD_SKIP_COMPAT=1 (a runtime image).
APT_PKGS_TEST=(
	systemd  # systemd-analyze verify: test/deploy checks deploy/firecracker/envd.service
	iproute2 # ip: tests bring up loopback in the network namespaces they make
	zsh fish # envctl's completion scripts are tried in each shell they are for
)

done_steps=()
note() { done_steps+=("$*"); }
log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root"

# --- apt ---------------------------------------------------------------------
install_apt() {
	local pkgs=("${APT_PKGS[@]}")
	[[ ${ENVD_INSTALL_FULL:-0} == 1 ]] && pkgs+=("${APT_PKGS_FULL[@]}")
	[[ ${ENVD_SKIP_COMPAT:-0} == 1 ]] || pkgs+=("${APT_PKGS_TEST[@]}")
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		pkgs+=(nodejs npm)
	fi

	# One dpkg-query for all packages; anything not "install ok installed" is missing.
	local missing=() p status
	declare -A installed=()
	while read -r p status; do
		[[ $status == ii ]] && installed[$p]=1
	done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${pkgs[@]}" 2>/dev/null || true)
	for p in "${pkgs[@]}"; do
		[[ -n ${installed[$p]:-} ]] || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		return
	fi

	log "apt-get install ${missing[*]}"
	local lock=(-o DPkg::Lock::Timeout=600)
	apt-get "${lock[@]}" update -qq
	apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	note "apt: ${#missing[@]} pkgs"
}

# --- Deno kernel -------------------------------------------------------------
deno_platform_pkg() {
	case $(uname -m) in
	x86_64 | amd64) echo linux-x64-glibc ;;
	aarch64 | arm64) echo linux-arm64-glibc ;;
	*) die "no deno build for $(uname -m)" ;;
	esac
}

install_deno() {
	local plat bin have=""
	plat=$(deno_platform_pkg)
	bin=$KERNELS_DIR/node_modules/@deno/$plat/deno
	if [[ -f $KERNELS_DIR/node_modules/deno/package.json ]]; then
		have=$(node -p "require('$KERNELS_DIR/node_modules/deno/package.json').version" 2>/dev/null || true)
	fi
	if [[ $have != "$DENO_VERSION" || ! -x $bin ]]; then
		log "npm install deno@$DENO_VERSION into $KERNELS_DIR"
		mkdir -p "$KERNELS_DIR"
		if [[ ! -f $KERNELS_DIR/package.json ]]; then
			printf '{\n  "name": "envd-kernels",\n  "private": true\n}\n' >"$KERNELS_DIR/package.json"
		fi
		(cd "$KERNELS_DIR" && npm install --no-audit --no-fund --save-exact --loglevel=error "deno@$DENO_VERSION" >/dev/null)
		[[ -x $bin ]] || die "deno binary missing after install: $bin"
		note "deno $DENO_VERSION"
	fi

	local spec_dir=$KERNELSPEC_DIR/deno want
	want=$(
		cat <<EOF
{
  "argv": ["$bin", "jupyter", "--kernel", "--conn", "{connection_file}"],
  "display_name": "Deno",
  "language": "typescript",
  "env": {"NO_COLOR": "1"}
}
EOF
	)
	if [[ ! -f $spec_dir/kernel.json || $(<"$spec_dir/kernel.json") != "$want" ]]; then
		mkdir -p "$spec_dir"
		printf '%s\n' "$want" >"$spec_dir/kernel.json"
		note "deno kernelspec"
	fi
}

check_kernelspecs() {
	local specs
	specs=$(/usr/bin/python3 -c '
from jupyter_client.kernelspec import KernelSpecManager
print(" ".join(sorted(KernelSpecManager().find_kernel_specs())))')
	local k
	for k in python3 ir deno; do
		[[ " $specs " == *" $k "* ]] || die "kernelspec '$k' not found by jupyter (have: $specs)"
	done
}

# --- sandbox user ------------------------------------------------------------
install_user() {
	if ! id -u "$SANDBOX_USER" >/dev/null 2>&1; then
		useradd -m -d "/home/$SANDBOX_USER" -s /bin/bash "$SANDBOX_USER"
		note "user $SANDBOX_USER"
	fi
	local sudoers=/etc/sudoers.d/$SANDBOX_USER
	local want="$SANDBOX_USER ALL=(ALL:ALL) NOPASSWD: ALL"
	if [[ ! -f $sudoers || $(<"$sudoers") != "$want" || $(stat -c %a "$sudoers") != 440 ]]; then
		local tmp
		tmp=$(mktemp /etc/sudoers.d/.user.XXXXXX)
		printf '%s\n' "$want" >"$tmp"
		chmod 0440 "$tmp"
		visudo -cqf "$tmp" || {
			rm -f "$tmp"
			die "sudoers entry failed visudo check"
		}
		mv -f "$tmp" "$sudoers"
		note "sudoers"
	fi
}

# --- packages from code -------------------------------------------------------
# One Python environment for kernels and commands: a venv is exempt from
# PEP 668 (Debian's python3 refuses `pip install` as "externally managed"),
# and --system-site-packages keeps Debian's Jupyter, numpy, pandas and
# matplotlib visible. Built from /usr/bin/python3, never the first python3 on
# PATH (a pyenv build on CI machines): the kernels run Debian's ipykernel.
install_python_venv() {
	local cfg=$PYTHON_VENV/pyvenv.cfg
	if [[ -x $PYTHON_VENV/bin/python && -x $PYTHON_VENV/bin/pip && -f $cfg ]] &&
		grep -qx 'home = /usr/bin' "$cfg" && grep -qx 'include-system-site-packages = true' "$cfg"; then
		return
	fi
	log "python3 -m venv --system-site-packages $PYTHON_VENV"
	# ensurepip installs Debian's own pip wheel (python3-pip-whl): no index needed.
	/usr/bin/python3 -m venv --system-site-packages "$PYTHON_VENV"
	"$PYTHON_VENV/bin/python" -c 'import sys; assert sys.prefix != sys.base_prefix' ||
		die "$PYTHON_VENV/bin/python is not a virtual environment"
	note "python venv"
}

# share_with_user DIR: DIR and everything in it become the sandbox user's,
# and a default ACL keeps what root creates in it later (a root kernel's
# `pip install`) writable by the sandbox user, who can then upgrade or
# remove it. Without ACL support, root's installs stay importable by
# everyone and removable by root only.
share_with_user() {
	local dir=$1 acl="u:$SANDBOX_USER:rwX,d:u:$SANDBOX_USER:rwX"
	if [[ $(stat -c %U "$dir") == "$SANDBOX_USER" ]] &&
		getfacl -p --omit-header "$dir" 2>/dev/null | grep -qx "default:user:$SANDBOX_USER:rwx"; then
		return
	fi
	chown -R "$SANDBOX_USER:" "$dir"
	if ! setfacl -R -m "$acl" "$dir" 2>/dev/null; then
		log "warning: no ACLs on $dir: what root installs there stays root's"
	fi
	note "$dir for $SANDBOX_USER"
}

install_packages_env() {
	install_python_venv
	share_with_user "$PYTHON_VENV"
	# R_LIBS (set by envd) and R's default R_LIBS_SITE both put the site
	# library first in .libPaths(): install.packages writes there.
	mkdir -p "$R_LIBRARY"
	share_with_user "$R_LIBRARY"

	# commands.run starts `bash -l -c`, and /etc/profile resets PATH: put the
	# environment envd gives every process (VIRTUAL_ENV) back in front.
	local want
	want=$(
		cat <<'EOF'
# Installed by envd's scripts/install-deps.sh. envd gives every process
# VIRTUAL_ENV (the Python environment kernels use) and its bin first on
# PATH; /etc/profile has just reset PATH, so a login shell puts it back.
if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
	case ":$PATH:" in
	*":$VIRTUAL_ENV/bin:"*) ;;
	*) PATH="$VIRTUAL_ENV/bin:$PATH" ;;
	esac
	export PATH
fi
EOF
	)
	if [[ ! -f $PROFILE_SNIPPET || $(<"$PROFILE_SNIPPET") != "$want" ]]; then
		printf '%s\n' "$want" >"$PROFILE_SNIPPET"
		chmod 0644 "$PROFILE_SNIPPET"
		note "$PROFILE_SNIPPET"
	fi
}

# --- kernels' first-use caches -----------------------------------------------
# What a kernel would build on its first use in a new sandbox is built here,
# at image build, so that the first context of a language is about as fast as
# the second (bench/coldctx.sh measures both):
#   - matplotlib's font cache (~/.cache/matplotlib/fontlist-v*.json), for root
#     (whose kernels run by default) and the sandbox user (-strict-users):
#     without it the first `import matplotlib.pyplot` of each opens every
#     font (and, when that takes over 5 s, writes "Matplotlib is building
#     the font cache" to the cell's stderr). Rebuilt when a font or
#     matplotlib was installed since.
#   - The Java kernel's agent, compiled (without it each kernel start compiles
#     EnvdJShell.java in the java launcher's source-file mode), and class
#     data (CDS) archives of what its two JVMs load at start (JShell, javac,
#     JDI): mapped instead of parsed. In $JAVA_PREBUILT/KEY, KEY the
#     SHA-256 of the agent's source, a NUL and the java launcher's resolved
#     path (kernel.py's prebuilt_key): envd's Java kernel uses it only for
#     the very source it embeds and only while root alone can change it
#     (root's, mode 0755/0644), and otherwise compiles the agent as before.
#     Rebuilt when the source or the JDK changed.
# Nothing else is built on first use: Python's compiled modules come with the
# packages (Debian's py3compile, pip), R reads its installed packages'
# indexes as installed, and Deno's first start only creates two empty SQLite
# caches in its DENO_DIR (~/.cache/deno), which costs it nothing measurable.
install_kernel_caches() {
	cache_matplotlib root
	cache_matplotlib "$SANDBOX_USER"
	cache_java_kernel
}

# cache_matplotlib USER: matplotlib's font cache in USER's home.
cache_matplotlib() {
	local user=$1 home="" list="" f fm=/usr/lib/python3/dist-packages/matplotlib/font_manager.py
	[[ -f $fm ]] || return 0
	IFS=: read -r _ _ _ _ _ home _ < <(getent passwd "$user") || true
	[[ -n $home && -d $home ]] || return 0
	for f in "$home"/.cache/matplotlib/fontlist-v*.json; do
		if [[ -f $f && (-z $list || $f -nt $list) ]]; then list=$f; fi
	done
	# Up to date unless matplotlib or a font was installed (a new inode, a
	# new ctime: dpkg keeps the packages' mtimes) after it was written.
	if [[ -n $list ]] && [[ -z $(find "$fm" /usr/share/fonts /usr/local/share/fonts \
		-cnewer "$list" -print -quit 2>/dev/null) ]]; then
		return
	fi
	rm -f "$home"/.cache/matplotlib/fontlist-v*.json
	runuser -u "$user" -- env -i HOME="$home" PATH=/usr/bin:/bin LANG=C.UTF-8 \
		/usr/bin/python3 -c 'import matplotlib.font_manager' ||
		die "matplotlib's font cache for $user"
	note "matplotlib font cache ($user)"
}

cache_java_kernel() {
	local jshell java key dir
	jshell=$(command -v jshell || echo /usr/bin/jshell)
	jshell=$(realpath -e "$jshell" 2>/dev/null) || return 0
	java=$(realpath -e "${jshell%/*}/java" 2>/dev/null) || return 0
	if [[ ! -f $JAVA_AGENT_SRC ]]; then
		log "warning: no $JAVA_AGENT_SRC: the Java kernel will compile its agent at each start"
		return
	fi
	key=$({ cat "$JAVA_AGENT_SRC"; printf '\0%s' "$java"; } | sha256sum | cut -d' ' -f1)
	dir=$JAVA_PREBUILT/$key
	java_kernel_built "$java" "$dir" && return
	mkdir -p "$JAVA_PREBUILT"
	chown root:root "${JAVA_PREBUILT%/*}" "$JAVA_PREBUILT"
	chmod 0755 "${JAVA_PREBUILT%/*}" "$JAVA_PREBUILT"
	# One build at a time (`make test` runs this script, maybe twice at once).
	local lock status=0
	exec {lock}>"$JAVA_PREBUILT/.lock"
	flock "$lock"
	if ! java_kernel_built "$java" "$dir"; then
		log "building the Java kernel's agent and class data archives in $dir"
		local tmp old
		tmp=$(mktemp -d "$JAVA_PREBUILT/.build.XXXXXX")
		(umask 022 && build_java_kernel "$java" "$dir" "$tmp") || status=$?
		rm -rf "$tmp"
		if ((status)); then
			rm -rf "$dir"
			log "warning: building the Java kernel's prebuilt agent failed: the kernel will compile it at each start"
		else
			# Other keys: older agents, another JDK's; unfinished builds.
			for old in "$JAVA_PREBUILT"/* "$JAVA_PREBUILT"/.build.*; do
				if [[ -e $old && $old != "$dir" ]]; then rm -rf "$old"; fi
			done
			note "java kernel agent and CDS archives"
		fi
	fi
	exec {lock}>&-
}

# java_kernel_built JAVA DIR: DIR is complete and newer than the JDK (an
# archive is only good for the very JVM that wrote it).
java_kernel_built() {
	local jdk=${1%/bin/*} dir=$2
	[[ -f $dir/envd-jshell.jar && -f $dir/agent.jsa && -f $dir/remote.jsa ]] &&
		[[ -z $(find "$jdk/lib/server/libjvm.so" "$jdk/lib/modules" -cnewer "$dir/agent.jsa" -print -quit 2>/dev/null) ]]
}

# build_java_kernel JAVA DIR TMP: the jar, then the classes the two JVMs
# load while the agent starts and runs typical cells (a class list each),
# then an archive of each list, dumped with the options kernel.py runs them
# with. The agent's archive records the jar's path: the jar is built in
# place. Each file appears whole (renamed into place).
build_java_kernel() {
	local java=$1 dir=$2 tmp=$3 bin=${1%/*}
	# (set -e does not hold here: the caller tests the status.)
	"$bin/javac" -nowarn -d "$tmp/classes" "$JAVA_AGENT_SRC" || return
	rm -rf "$dir" && mkdir -m 0755 "$dir" || return
	"$bin/jar" --create --file "$dir/.envd-jshell.jar.tmp" -C "$tmp/classes" . || return
	mv "$dir/.envd-jshell.jar.tmp" "$dir/envd-jshell.jar" || return
	local agent_opts=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData -Xss4m)
	mkdir "$tmp/cp" || return
	(cd "$tmp" && timeout 300 /usr/bin/python3 - "$java" "${agent_opts[@]}" \
		-XX:DumpLoadedClassList="$tmp/agent.classlist" -cp "$dir/envd-jshell.jar" EnvdJShell \
		-cp "$tmp/cp" -XX:-UsePerfData -Dfile.encoding=UTF-8 -XX:DumpLoadedClassList="$tmp/remote.classlist" <<'EOF'
# Drives the agent (the framed protocol of EnvdJShell.java) through typical cells.
import struct, subprocess, sys
cells = [
    'System.setProperty("user.dir", "/");',
    "1+1",
    'System.out.println("hello"); System.err.println("err");',
    'int x = 41;\nString greet(String n) { return "hi " + n; }\n'
    "class Point { final int a; Point(int a) { this.a = a; } }\nimport java.time.*;",
    'greet("bob") + new Point(x).a + Duration.ofSeconds(61).toMinutes()',
    "List.of(1, 2, 3).stream().map(i -> i * 2).collect(Collectors.toList())",
    'throw new IllegalStateException("boom");',
    "undefinedName + 1",
]
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
def frame():
    head = p.stdout.read(5)
    if len(head) < 5:
        sys.exit("the Java agent exited")
    kind, n = struct.unpack(">cI", head)
    return kind, p.stdout.read(n)
while frame()[0] != b"r":
    pass
for code in cells:
    data = code.encode()
    p.stdin.write(struct.pack(">cI", b"X", len(data)) + data)
    p.stdin.flush()
    while frame()[0] != b"d":
        pass
p.stdin.write(struct.pack(">cI", b"Q", 0))
p.stdin.flush()
sys.exit(p.wait())
EOF
	) || return
	"$java" -Xshare:dump -Xlog:disable -Xlog:all=error:stderr "${agent_opts[@]}" \
		-XX:SharedClassListFile="$tmp/agent.classlist" -XX:SharedArchiveFile="$dir/.agent.jsa.tmp" \
		-cp "$dir/envd-jshell.jar" >/dev/null || return
	"$java" -Xshare:dump -Xlog:disable -Xlog:all=error:stderr -XX:-UsePerfData \
		-XX:SharedClassListFile="$tmp/remote.classlist" -XX:SharedArchiveFile="$dir/.remote.jsa.tmp" >/dev/null || return
	chmod 0644 "$dir"/.*.jsa.tmp &&
		mv "$dir/.agent.jsa.tmp" "$dir/agent.jsa" &&
		mv "$dir/.remote.jsa.tmp" "$dir/remote.jsa"
}

# --- Go ----------------------------------------------------------------------
# envd builds with the Go named in go.mod. A machine without any Go gets that
# release from the Go module proxy (golang.org/toolchain, the same zip the go
# command itself downloads for GOTOOLCHAIN), unpacked into /usr/local/go.
install_go() {
	[[ ${ENVD_SKIP_GO:-0} == 1 ]] && return
	if command -v go >/dev/null || [[ -x /usr/local/go/bin/go ]]; then
		return
	fi
	local want arch
	want=$(awk '/^go /{print $2}' "$REPO_ROOT/go.mod")
	case $(uname -m) in
	x86_64) arch=amd64 ;;
	aarch64) arch=arm64 ;;
	*) die "no Go toolchain for $(uname -m)" ;;
	esac
	local mod="v0.0.1-go${want}.linux-${arch}"
	local tmp
	tmp=$(mktemp -d)
	log "downloading Go ${want} from the Go module proxy"
	curl -fsSL -o "$tmp/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/${mod}.zip" ||
		die "cannot download Go ${want} from proxy.golang.org"
	command -v unzip >/dev/null || apt-get install -y -q --no-install-recommends unzip >/dev/null
	unzip -q "$tmp/go.zip" -d "$tmp"
	rm -rf /usr/local/go
	mv "$tmp/golang.org/toolchain@${mod}" /usr/local/go
	chmod -R a+rX /usr/local/go
	chmod +x /usr/local/go/bin/* /usr/local/go/pkg/tool/*/* 2>/dev/null || true
	rm -rf "$tmp"
	note "go ${want}"
}

# --- compat suite npm deps ---------------------------------------------------
install_compat() {
	[[ ${ENVD_SKIP_COMPAT:-0} == 1 ]] && return
	local dir=$REPO_ROOT/test/compat
	[[ -f $dir/package-lock.json ]] || return
	# npm ci writes node_modules/.package-lock.json; it is newer than the lock when up to date.
	local stamp=$dir/node_modules/.package-lock.json
	if [[ ! -f $stamp || $dir/package-lock.json -nt $stamp ]]; then
		log "npm ci in test/compat: the SDKs the tests drive (minutes on a first run, seconds after)"
		(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
		note "compat npm ci"
	fi
}

case ${1:-} in
"") ;;
--caches)
	start=$SECONDS
	install_kernel_caches
	if ((${#done_steps[@]})); then
		summary=$(printf '%s, ' "${done_steps[@]}")
		echo "install-deps: built ${summary%, } ($((SECONDS - start))s)"
	fi
	exit 0
	;;
*) die "unknown argument $1 (none, or --caches)" ;;
esac

start=$SECONDS
install_apt
install_go
install_deno
check_kernelspecs
install_user
install_packages_env
install_kernel_caches
install_compat
if ((${#done_steps[@]} == 0)); then
	echo "install-deps: everything already present ($((SECONDS - start))s)"
else
	summary=$(printf '%s, ' "${done_steps[@]}")
	echo "install-deps: installed ${summary%, } ($((SECONDS - start))s)"
fi
