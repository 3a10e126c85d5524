#!/bin/bash
# start-up.sh: what a sandbox starts. It prepares the environment, then execs
# envd with the flags for a sandbox; envd then supervises Jupyter itself.
#
# Configure it with envd's own variables, which pass through unchanged (see
# `envd -h`; every flag -x-y is ENVD_X_Y). Those it sets when unset:
#   ENVD_HOST=0.0.0.0   listen on every interface (the orchestrator connects from outside)
# Others worth knowing: ENVD_PORT (49983), ENVD_CODE_PORT (49999),
# ENVD_VSOCK_PORT (also serve on AF_VSOCK), ENVD_UNIX_SOCKET, ENVD_ACCESS_TOKEN,
# ENVD_DEFAULT_USER, ENVD_STRICT_USERS (each request gets exactly its user's
# rights; kernels run as the default user), ENVD_NO_JUPYTER, ENVD_LOG_FORMAT,
# ENVD_LOG_LEVEL. Where code installs packages (docs/packages.md, "Installing
# packages from code"): ENVD_PYTHON_VENV (default /opt/envd-python, the virtual
# environment kernels and commands share: envd puts its bin first on their
# PATH) and ENVD_R_LIBRARY (default /usr/local/lib/R/site-library); set one
# empty to turn it off.
# STARTUP_ENVD_BIN names the envd binary (default: envd beside this script,
# else /usr/local/bin/envd, else envd on PATH). Arguments are passed on to envd.
#
# The access token reaches envd by environment only: every user of the
# machine can read a process's command line (/proc/PID/cmdline), while its
# environment is readable only by root and the process's own account (envd
# gives none of it to the processes and kernels it starts). Set
# ENVD_ACCESS_TOKEN; an -access-token argument given to this script is moved
# into ENVD_ACCESS_TOKEN rather than passed on.
set -euo pipefail

# A sane environment whatever started us (an init, a container runtime with
# an empty environment, a test).
# PATH: what we were given, without "." or empty entries (bash's own default
# PATH has "."), plus the standard directories it lacks.
new_path=
IFS=: read -ra dirs <<<"${PATH:-}"
for dir in "${dirs[@]}" /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
	if [[ -n $dir && $dir != . && ":$new_path:" != *":$dir:"* ]]; then
		new_path=${new_path:+$new_path:}$dir
	fi
done
export PATH=$new_path
export LANG=${LANG:-C.UTF-8}
export HOME=${HOME:-/root}
umask 022

# The sandbox account's home must exist: commands and kernels start there.
sandbox_user=${ENVD_DEFAULT_USER:-user}
if home=$(getent passwd "$sandbox_user" | cut -d: -f6) && [[ -n $home ]]; then
	if [[ ! -d $home ]]; then
		mkdir -p "$home"
		chown "$sandbox_user": "$home" 2>/dev/null || true
	fi
fi

# Open-file limits: every process, pipe, watch and kernel channel is one.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

envd=${STARTUP_ENVD_BIN:-}
if [[ -z $envd ]]; then
	here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	for candidate in "$here/envd" /usr/local/bin/envd "$(command -v envd || true)"; do
		if [[ -n $candidate && -x $candidate ]]; then
			envd=$candidate
			break
		fi
	done
fi
if [[ -z $envd || ! -x $envd ]]; then
	echo "start-up.sh: no envd binary found (set STARTUP_ENVD_BIN, or install it as /usr/local/bin/envd)" >&2
	exit 1
fi

# envd reads ENVD_* itself, and a flag would override the variable: pass a
# flag only for what the environment leaves unset.
args=()
[[ -v ENVD_HOST ]] || args+=(-host 0.0.0.0)

while (($#)); do
	case $1 in
	-access-token | --access-token)
		if (($# < 2)); then
			echo "start-up.sh: $1 needs a value" >&2
			exit 2
		fi
		export ENVD_ACCESS_TOKEN=$2
		shift 2
		;;
	-access-token=* | --access-token=*)
		export ENVD_ACCESS_TOKEN=${1#*=}
		shift
		;;
	--)
		args+=("$@")
		break
		;;
	*)
		args+=("$1")
		shift
		;;
	esac
done

exec "$envd" "${args[@]}"
