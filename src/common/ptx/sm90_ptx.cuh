// Thin PTX wrappers that CCCL's cuda::ptx does not provide (wgmma control, shared-memory
// descriptors, cp.async with zero-fill, setmaxnreg). TMA and mbarrier go through cuda::ptx.
#pragma once

#include <cuda/ptx>
#include <cstdint>

namespace fusedmoe::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- wgmma control ------------------------------------------------------------------------------
// fence: orders this thread's register/shared accesses before the next wgmma (PTX requires it
// before the first wgmma and whenever accumulator registers were touched in between).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving accumulator reads/writes across an in-flight wgmma.
template <class T>
__device__ __forceinline__ void fence_operand(T& reg) { asm volatile("" : "+f"(reg)::"memory"); }

/// Shared-memory matrix descriptor for a K-major tile stored with the 128-byte swizzle (rows of
/// 128 bytes, 8-row atoms of 1024 bytes; the tile must start 1024-byte aligned). Advancing along
/// K inside the 128-byte row is a plain add of bytes/16 to the start address field.
__device__ __forceinline__ uint64_t smem_desc_k128b(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  uint64_t desc = 0;
  desc |= (addr & 0x3FFFFull) >> 4;           // start address, 16-byte units (bits 0-13)
  desc |= uint64_t(1024 >> 4) << 32;          // stride byte offset: one 8-row atom (bits 32-45)
  desc |= uint64_t(1) << 62;                  // layout: SWIZZLE_128B
  return desc;
}

/// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128B-swizzled tile: the same
/// pattern TMA's CU_TENSOR_MAP_SWIZZLE_128B writes and wgmma's SWIZZLE_128B reads.
__device__ __forceinline__ uint32_t swizzle128_offset(int row, int chunk) {
  return uint32_t(row) * 128u + (uint32_t(chunk ^ (row & 7)) << 4);
}

// ---- cp.async (non-bulk) with zero fill ----------------------------------------------------------
/// Copies src_bytes (0 or 16) from global to shared and zero-fills the rest of the 16 bytes.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
/// 4-byte variant (scales), src_bytes 0 or 4.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// ---- register reallocation between warpgroups (needs __launch_bounds__(threads, 1)) ------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- vector reduction to global memory ----------------------------------------------------------
/// addr[0] += a, addr[1] += b as one 8-byte reduction (addr 8-byte aligned): half the atomic
/// operations of two scalar ones. No "memory" clobber: the kernel never reads what it reduces
/// into, and a clobber would make the compiler reload every shared-memory value (the tile's
/// columns) after each reduction.
__device__ __forceinline__ void red_add_v2(float* addr, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b));
}
/// Four adjacent fp32 additions in one reduction (sm_90); addr 16-byte aligned.
__device__ __forceinline__ void red_add_v4(float* addr, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(addr), "f"(a), "f"(b),
               "f"(c), "f"(d));
}

// ---- math ---------------------------------------------------------------------------------------
/// max(|a|, |b|) that propagates NaN (fmaxf would drop it): a NaN in a quantization block must
/// poison the block's scale, as the host quantizer does.
__device__ __forceinline__ float abs_max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(fabsf(a)), "f"(fabsf(b)));
  return r;
}

/// 2^x and 1/x on the special-function unit, denormals flushed: one instruction each. Without
/// .ftz (what __expf and __fdividef compile to here, no -use_fast_math) the exponential adds a
/// range check and two predicated multiplies (5 instructions; ncu, session 36). A denormal 2^x
/// becomes 0 and 1/x of |x| > 2^126 becomes 0, as __fdividef's quotient did.
__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float rcp_approx_ftz(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

}  // namespace fusedmoe::ptx
