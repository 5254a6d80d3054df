#!/usr/bin/env bash
# setup.sh -- install what `make demo` or `make test` needs, or say how.
#
# Usage: scripts/setup.sh demo|test
#
# Each need is probed directly (a command on PATH or a header), so the script
# also passes on machines that have the tools without Debian's packages. What
# is missing is installed with apt-get when running as root; otherwise the one
# apt-get line that installs it is printed and the script exits with 1.
set -u

mode=${1:-}
case "$mode" in
demo | test) ;;
*)
    echo "setup: usage: scripts/setup.sh demo|test" >&2
    exit 2
    ;;
esac

missing=()   # Debian package names
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_header() { [ -e "/usr/include/$1" ] || [ -e "/usr/local/include/$1" ]; }
need_cmd() { have_cmd "$1" || missing+=("$2"); }
need_header() { have_header "$1" || missing+=("$2"); }

if ! have_cmd cargo; then
    echo "setup: cargo not found: install Rust (stable) with rustup, then run this again" >&2
    exit 1
fi

# The demo: pmlab itself, and memlat built natively and with `pmlab cc`
# (clang's sanitizer coverage) by `pmlab validate`.
need_cmd make make
need_cmd cc gcc
have_cmd clang-14 || have_cmd clang || missing+=(clang-14)
# pmlab cc's sampling plugin (crates/emu/plugin) is built against LLVM 14.
have_cmd llvm-config-14 || missing+=(llvm-14-dev)

if [ "$mode" = test ]; then
    # The tests also build the PMDK workloads, CMake and C++ projects with
    # pmlab cc/gcc, run valgrind and read ELF files with binutils.
    have_cmd clang-14 || missing+=(clang-14)
    need_cmd g++ g++
    need_cmd cmake cmake
    need_cmd nm binutils
    need_cmd valgrind valgrind
    need_cmd redis-cli redis-tools   # the kv-server's cluster test drives redis-cli
    need_cmd python3 python3
    need_header numa.h libnuma-dev
    need_header libpmem.h libpmem-dev
    need_header libpmemobj.h libpmemobj-dev
    if have_cmd rustup; then
        for c in clippy rustfmt; do
            rustup component list --installed 2>/dev/null | grep -q "^$c" ||
                rustup component add "$c" >/dev/null 2>&1 ||
                echo "setup: warning: rustup could not add $c" >&2
        done
    fi
fi

[ ${#missing[@]} -eq 0 ] && exit 0

# One entry per package, in the order found.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
line="apt-get install -y ${missing[*]}"
if ! have_cmd apt-get; then
    echo "setup: missing for 'make $mode': ${missing[*]} (Debian package names): install them with your package manager" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing for 'make $mode': ${missing[*]}; install them with: sudo apt-get update && sudo $line" >&2
    exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
    echo "setup: apt-get failed to install ${missing[*]}; run: apt-get update && $line" >&2
    exit 1
fi
