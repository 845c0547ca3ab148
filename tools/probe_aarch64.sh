#!/usr/bin/env bash
# Probe for issue 18: cross-compile an IREE module for AArch64 on this x86 machine, run it under
# qemu-user with the aarch64 IREE runtime of the same version, check the numbers against numpy,
# check the NEON code (fmla v.4s), run llvm-mca -mcpu=neoverse-n1 on the inner loop, and probe
# SVE (scalable and fixed-length). See docs/aarch64-probe.md for the recipe and the results.
#
# Usage: tools/probe_aarch64.sh            (from anywhere; idempotent; exits non-zero on failure)
#   WORK=/tmp/aarch64_probe   scratch folder (wheel, unpacked runtime, modules, dumps)
#   SKIP_SVE=1                skip the SVE part
#   NO_APT=1                  never call apt-get (fail if a tool is missing)
# Needs: the project's .venv (iree-base-compiler + iree-base-runtime + numpy); root + apt for the
# Debian packages (qemu-user, arm64 cross libc/libstdc++, aarch64 binutils, llvm-19).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY="$REPO/.venv/bin/python"
WORK=${WORK:-/tmp/aarch64_probe}
SYSROOT=/usr/aarch64-linux-gnu
DEB_PKGS=(qemu-user libc6-arm64-cross libstdc++6-arm64-cross libgcc-s1-arm64-cross
          binutils-aarch64-linux-gnu llvm-19)
MCA=/usr/lib/llvm-19/bin/llvm-mca   # LLVM >= 17 has a real Neoverse N1 model; 14 and 16 use Cortex-A57's

step() { printf '\n=== %s\n' "$*"; }
die() { echo "FAIL: $*" >&2; exit 1; }

[ -x "$PY" ] || die "no $PY (run 'make test' or create the venv first)"
mkdir -p "$WORK"
cd "$WORK"

# ---------------------------------------------------------------- 1. Debian packages
step "1. Debian packages: ${DEB_PKGS[*]}"
missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ -z "${NO_APT:-}" ] && [ "$(id -u)" = 0 ] || die "missing packages: ${missing[*]} (need root + apt)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
    > "$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log"; die "apt-get install ${missing[*]}"; }
fi
qemu-aarch64 --version | head -1
[ -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ] || die "no $SYSROOT/lib/ld-linux-aarch64.so.1"

# ---------------------------------------------------------------- 2. aarch64 runtime wheel
VER=$("$PY" -c "import importlib.metadata as m; print(m.version('iree-base-runtime'))")
PYVER=$("$PY" -c "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')")
step "2. aarch64 iree-base-runtime==$VER wheel (python $PYVER)"
WHEEL=$(ls "$WORK"/wheels/iree_base_runtime-"$VER"-*aarch64*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHEEL" ]; then
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 \
    --python-version "$PYVER" "iree-base-runtime==$VER" -d "$WORK/wheels" \
    || die "pip download of the aarch64 iree-base-runtime wheel"
  WHEEL=$(ls "$WORK"/wheels/iree_base_runtime-"$VER"-*aarch64*.whl | head -1)
fi
echo "wheel: $(basename "$WHEEL")"
RT="$WORK/rt/iree/_runtime_libs"
if [ ! -x "$RT/iree-run-module" ]; then
  rm -rf "$WORK/rt" && mkdir -p "$WORK/rt"
  # unzip keeps the executable bits (python -m zipfile does not: qemu then exits 1 silently)
  (cd "$WORK/rt" && unzip -q "$WHEEL" 'iree/_runtime_libs/*')
  chmod +x "$RT"/iree-*
fi
QEMU=(qemu-aarch64 -L "$SYSROOT")
"${QEMU[@]}" "$RT/iree-run-module" --list_drivers | grep -q local-task \
  || die "aarch64 iree-run-module does not start under qemu"
echo "runtime: $RT/iree-run-module (starts under qemu)"

# ---------------------------------------------------------------- 3. cross-compile
step "3. cross-compile a 64x64x64 f32 linalg.matmul with the aarch64 target's flags"
IC=$("$PY" -c "import iree.compiler, pathlib; print(pathlib.Path(iree.compiler.__file__).parent / '_mlir_libs' / 'iree-compile')")
mapfile -t FLAGS < <(cd "$REPO" && "$PY" -c "
from mlir_ansor.tuner.toolchain import target_flags
print('\n'.join(target_flags('aarch64')))")
echo "iree-compile: $IC"
echo "flags: ${FLAGS[*]}"
cat > mm.mlir <<'EOF'
func.func @main(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %c = linalg.fill ins(%zero : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>) outs(%c : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}
EOF
cat > check.py <<'EOF'
import numpy as np, sys
a, b, o = (np.load(f) for f in sys.argv[1:4])
ref = a.astype(np.float64) @ b.astype(np.float64)
err = float(np.abs(o - ref).max()) if o.shape == ref.shape else float("inf")
ok = o.shape == ref.shape and np.allclose(o, ref, rtol=1e-4, atol=1e-4)
print(f"shape={o.shape} max_abs_err={err:.3g} {'OK' if ok else 'MISMATCH'}")
sys.exit(0 if ok else 1)
EOF
"$PY" -c "
import numpy as np; r = np.random.default_rng(0)
np.save('a.npy', r.standard_normal((64, 64), dtype=np.float32))
np.save('b.npy', r.standard_normal((64, 64), dtype=np.float32))"
rm -rf dump_neon
"$IC" "${FLAGS[@]}" --iree-hal-dump-executable-files-to=dump_neon mm.mlir -o mm_neon.vmfb \
  || die "iree-compile for aarch64"
ls -l mm_neon.vmfb

# ---------------------------------------------------------------- 4. run under qemu
step "4. run under qemu-aarch64 and compare with numpy"
rm -f out_neon.npy
t0=$(date +%s.%N)
"${QEMU[@]}" "$RT/iree-run-module" --module=mm_neon.vmfb --device=local-task --function=main \
  --input=@a.npy --input=@b.npy --output=@out_neon.npy || die "iree-run-module under qemu"
t1=$(date +%s.%N)
"$PY" check.py a.npy b.npy out_neon.npy || die "aarch64 result differs from numpy"
echo "qemu run wall time: $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"

# ---------------------------------------------------------------- 5. NEON code
step "5. NEON code: fmla on .4s in the dumped assembly and in the object"
ASM=$(ls dump_neon/*embedded_elf_arm_64.s)
n_asm=$(grep -cE 'fmla[[:space:]]+v[0-9]+\.4s' "$ASM" || true)
n_obj=$(aarch64-linux-gnu-objdump -d dump_neon/*embedded_elf_arm_64.so | grep -cE 'fmla[[:space:]]+v[0-9]+\.4s' || true)
grep -m2 -E 'fmla[[:space:]]+v[0-9]+\.4s' "$ASM"
echo "fmla v.4s: $n_asm in $(basename "$ASM"), $n_obj in the .so (objdump)"
[ "$n_asm" -gt 0 ] && [ "$n_obj" -gt 0 ] || die "no fmla v.4s in the aarch64 code"

# ---------------------------------------------------------------- 6. llvm-mca
step "6. llvm-mca -mcpu=neoverse-n1 on the innermost loop holding fmla"
cat > extract_loop.py <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
labels = {l[:-1]: i for i, l in enumerate(lines) if re.match(r"^\.LBB\d+_\d+:$", l)}
best = None
for j, l in enumerate(lines):
    m = re.match(r"^\s+(b\.\w+|b|cbn?z|tbn?z)\s+.*?(\.LBB\d+_\d+)\s*$", l)
    if m and m.group(2) in labels and labels[m.group(2)] < j:   # a backward branch: a loop
        i = labels[m.group(2)]
        body = [x for x in lines[i + 1:j + 1] if x.strip() and not x.strip().startswith(".")]
        if any("fmla" in x for x in body) and (best is None or len(body) < len(best)):
            best = body
if not best:
    sys.exit("no loop with fmla found")
print("\n".join(best))
EOF
"$PY" extract_loop.py "$ASM" > loop.s
echo "inner loop: $(wc -l < loop.s) instructions, $(grep -c fmla loop.s) fmla"
[ -x "$MCA" ] || die "no $MCA (Debian package llvm-19)"
"$MCA" -mtriple=aarch64-unknown-linux-gnu -mcpu=neoverse-n1 -iterations=100 loop.s > mca.txt \
  || die "llvm-mca"
grep -E 'Iterations|Total Cycles|IPC|Block RThroughput' mca.txt
grep -q 'N1Unit' mca.txt || die "llvm-mca did not use the Neoverse N1 model"
grep -m1 -E 'fmla' mca.txt

# ---------------------------------------------------------------- 7. SVE
if [ -z "${SKIP_SVE:-}" ]; then
  step "7a. SVE, vector-length agnostic (IREE's default pipeline, scalable tiles)"
  SVE=(--iree-llvmcpu-target-cpu-features=+sve --iree-llvmcpu-enable-scalable-vectorization=true)
  rm -rf dump_sve
  "$IC" "${FLAGS[@]}" "${SVE[@]}" --iree-hal-dump-executable-files-to=dump_sve mm.mlir -o mm_sve.vmfb \
    || die "iree-compile with +sve"
  grep -o 'lowering_config<[^>]*>' dump_sve/configured_*.mlir | tail -1
  n=$(grep -cE 'fmla[[:space:]]+z[0-9]+\.s' dump_sve/*embedded_elf_arm_64.s || true)
  echo "fmla z.s: $n"; [ "$n" -gt 0 ] || die "no SVE fmla"
  for vl in 128 256 512; do
    rm -f out_sve.npy
    "${QEMU[@]}" -cpu "max,sve$vl=on" "$RT/iree-run-module" --module=mm_sve.vmfb --device=local-sync \
      --function=main --input=@a.npy --input=@b.npy --output=@out_sve.npy > /dev/null \
      || die "SVE module under qemu -cpu max,sve$vl=on"
    printf 'VL %4s bits: ' "$vl"; "$PY" check.py a.npy b.npy out_sve.npy || die "SVE VL $vl mismatch"
  done

  step "7b. SVE, fixed length 256 (LLVM flags; the module is only valid at VL 256)"
  rm -rf dump_vls
  "$IC" "${FLAGS[@]}" --iree-llvmcpu-target-cpu-features=+sve --aarch64-sve-vector-bits-min=256 \
    --aarch64-sve-vector-bits-max=256 --iree-hal-dump-executable-files-to=dump_vls mm.mlir \
    -o mm_vls256.vmfb || die "iree-compile with fixed-length SVE"
  echo "fmla z.s: $(grep -cE 'fmla[[:space:]]+z[0-9]+\.s' dump_vls/*embedded_elf_arm_64.s || true)"
  rm -f out_vls.npy
  "${QEMU[@]}" -cpu max,sve256=on "$RT/iree-run-module" --module=mm_vls256.vmfb --device=local-sync \
    --function=main --input=@a.npy --input=@b.npy --output=@out_vls.npy > /dev/null \
    || die "fixed-length SVE module under qemu -cpu max,sve256=on"
  printf 'VL  256 bits: '; "$PY" check.py a.npy b.npy out_vls.npy || die "fixed-length SVE mismatch"
  rm -f out_vls.npy
  "${QEMU[@]}" -cpu max,sve128=on "$RT/iree-run-module" --module=mm_vls256.vmfb --device=local-sync \
    --function=main --input=@a.npy --input=@b.npy --output=@out_vls.npy > /dev/null 2>&1 || true
  printf 'VL  128 bits (expected to be wrong): '
  if [ -f out_vls.npy ] && "$PY" check.py a.npy b.npy out_vls.npy; then
    die "fixed-length 256 module unexpectedly right at VL 128"
  fi
fi

step "all steps passed (scratch in $WORK)"
