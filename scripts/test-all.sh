#!/usr/bin/env bash
# vmio's one test command (README.md, "the test command"; `.ci/run` calls exactly this): on a
# fresh Debian 12 machine it installs everything the tests need, checks that every real tool
# is on PATH, then runs every check and test, Rust and Python. Safe to rerun: it installs only
# what is missing.
#
#   1. Debian packages: the real NBD clients (fio with its nbd engine, qemu-img/qemu-io/qemu-nbd,
#      nbdinfo/nbdcopy, nbdkit) and the QEMU guest (qemu-system-x86 under TCG, a Debian cloud
#      kernel with its virtio modules, a static busybox). qemu-utils is installed at the same
#      version as qemu-system-x86: a newer qemu-utils (e.g. from backports) conflicts with
#      Debian's qemu-system-x86 through qemu-system-common, and apt would otherwise REMOVE it,
#      taking qemu-img, qemu-io and qemu-nbd with it.
#   2. Each tool is checked on PATH; a missing one stops here with the package that has it.
#   3. Python: maturin, then the package with its test extras (`pip install '.[test]'`).
#   4. cargo fmt, clippy -D warnings, cargo test (real-client tests fail, never skip, when a
#      tool is missing), ruff, pytest (VMIO_REQUIRE_TOOLS=1: a missing tool fails its test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DEBIAN_FRONTEND=noninteractive PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export VMIO_REQUIRE_TOOLS=1

say() { printf 'vmio test: %s\n' "$*" >&2; }
die() { printf 'vmio test: error: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "not root and no sudo: cannot install Debian packages"
    SUDO=(sudo -n)
fi

# Prints nothing for a package dpkg does not know (dpkg-query's failure must not end the
# script under `set -e -o pipefail`: on a fresh machine qemu-system-x86 is unknown).
installed_version() { { dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true; } \
    | awk '$3 == "installed" {print $4}'; }

# --- 1. Debian packages ---------------------------------------------------------------------
APT_PACKAGES=(fio fio-examples libnbd-bin nbdkit linux-image-cloud-amd64 busybox-static procps bzip2 gcc
    chromium)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    [[ -n $(installed_version "$pkg") ]] || missing+=("$pkg")
done
qsys=$(installed_version qemu-system-x86)
qutils=$(installed_version qemu-utils)
if [[ -z $qsys || $qsys != "$qutils" || ${#missing[@]} -gt 0 ]]; then
    say "installing Debian packages: ${missing[*]} qemu-system-x86 qemu-utils"
    "${SUDO[@]}" apt-get update -qq
    # One version for both: the installed qemu-system-x86's, else apt's candidate for it.
    want=${qsys:-$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ {print $2}')}
    [[ -n $want && $want != "(none)" ]] || die "apt has no qemu-system-x86 (Debian main)"
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends --allow-downgrades \
        "${missing[@]}" "qemu-system-x86=$want" "qemu-utils=$want" >/dev/null
fi

# --- 2. every tool the tests use ------------------------------------------------------------
TOOLS=(fio:fio qemu-img:qemu-utils qemu-io:qemu-utils qemu-nbd:qemu-utils nbdinfo:libnbd-bin
    nbdcopy:libnbd-bin nbdkit:nbdkit qemu-system-x86_64:qemu-system-x86 busybox:busybox-static
    cargo:rustup rustfmt:rustup cargo-clippy:rustup python3:python3 pgrep:procps bzip2:bzip2 cc:gcc
    chromium:chromium)
for t in "${TOOLS[@]}"; do
    command -v "${t%%:*}" >/dev/null 2>&1 \
        || die "'${t%%:*}' is not on PATH after the set-up (Debian package or tool: ${t#*:})"
done
fio --enghelp 2>/dev/null | awk '$1 == "nbd" {found = 1} END {exit !found}' \
    || die "this fio has no nbd engine (fio >= 3.21 from Debian 12 has it)"
compgen -G '/boot/vmlinuz-*-cloud-amd64' >/dev/null \
    || die "no cloud kernel under /boot (Debian package linux-image-cloud-amd64)"

# --- 3. Python tooling ----------------------------------------------------------------------
command -v maturin >/dev/null 2>&1 || python3 -m pip install -q maturin
python3 -m pip install -q '.[test]'

# --- 4. every check and test ----------------------------------------------------------------
cargo fmt --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
ruff check python tests
ruff format --check python tests
pytest -q -rs tests
