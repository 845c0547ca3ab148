#!/usr/bin/env bash
# Set-up for the devices beyond this machine (called by `make test`; idempotent):
# Debian's qemu-user, the arm64 cross C/C++ runtime and llvm-19 (llvm-mca with a Neoverse N1
# model) and openssh-server (the ssh runner tests start their own sshd) where root + apt can
# install them, then the aarch64 iree-base-runtime wheel of the
# installed version, unpacked into the venv (python -m mlir_ansor.tuner.emulation install).
# Without root the packages are reported missing and the tests that need them are skipped
# with that reason; nothing here downloads at tuning time.
#   usage: tools/setup_devices.sh PYTHON
set -uo pipefail
PY=${1:?usage: tools/setup_devices.sh PYTHON}
PKGS=(qemu-user libc6-arm64-cross libstdc++6-arm64-cross libgcc-s1-arm64-cross llvm-19
      openssh-server)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null 2>&1
      apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || echo "setup_devices: apt-get could not install ${missing[*]}" >&2
    }
  else
    echo "setup_devices: not root (or no apt-get): ${missing[*]} not installed; the tests that" \
         "need them will be skipped" >&2
  fi
fi
"$PY" -m mlir_ansor.tuner.emulation install aarch64 >/dev/null \
  || echo "setup_devices: the aarch64 IREE runtime could not be installed" >&2
exit 0
