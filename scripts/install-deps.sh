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
#   - Where code installs packages (README: "Installing packages from code"):
#     the Python virtual environment /opt/envd-python (Debian's python3,
#     --system-site-packages) and R's site library /usr/local/lib/R/site-library,
#     both `user`'s and, through a default ACL, writable by `user` whoever
#     installs; /etc/profile.d/envd-python.sh keeps the venv first on a login
#     shell's PATH.
#   - npm dependencies of test/compat (`npm ci`), unless ENVD_SKIP_COMPAT=1.
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
		log "npm ci in test/compat"
		(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
		note "compat npm ci"
	fi
}

start=$SECONDS
install_apt
install_go
install_deno
check_kernelspecs
install_user
install_packages_env
install_compat
if ((${#done_steps[@]} == 0)); then
	echo "install-deps: everything already present ($((SECONDS - start))s)"
else
	summary=$(printf '%s, ' "${done_steps[@]}")
	echo "install-deps: installed ${summary%, } ($((SECONDS - start))s)"
fi
