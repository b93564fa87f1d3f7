#!/usr/bin/env bash
# On the GPU machine: the GPU checks of a change to the 4-bit (e2m1) kernels, short of the whole
# scripts/gpu_check.sh: test_layer_gpu's 4-bit cases, the other test binaries named, and the four
# compute-sanitizer tools on test_layer_gpu's SanitizerSmall. Prints one line per binary / tool.
#   scripts/four_bit_checks.sh DIR OUTDIR [test binaries in DIR, default: test_e2m1_gpu
#     test_e2m1_prepare_gpu test_nvfp4_grouped_gemm_gpu]
# DIR holds test_layer_gpu and the named binaries (decompressed, executable); logs go to OUTDIR.
set -u
N=$1 R=$2; shift 2
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=(test_e2m1_gpu test_e2m1_prepare_gpu test_nvfp4_grouped_gemm_gpu)
mkdir -p "$R"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
s=$SECONDS; timeout 200 "$N"/test_layer_gpu --gtest_filter='*Nvfp4*:*Mxfp4*:*FourBit*:*DecodeGemv*:*TwoKBlock*:*SanitizerSmall*:*EveryCompiledLayerConfigRuns*:*FullSizePresetsAtDecode*:*NarrowTail*:*LeanProducer*' > "$R"/tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$R"/tests.txt | tr '\n' ' ')"
grep -E "Failure|out of tolerance|did not finish" "$R"/tests.txt | head -6
for t in "${BINS[@]}"; do
  timeout 60 "$N/$t" > "$R/$t.txt" 2>&1; echo "$t rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' "$R/$t.txt" | tr '\n' ' ')"
done
for tool in memcheck racecheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh "$SAN" $tool "$N"/test_layer_gpu "$R/$tool.log")
  echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
