// fusedmoe: the stream type of the public API, without the CUDA headers.
#pragma once

struct CUstream_st;  // the CUDA runtime's opaque stream; cudaStream_t is CUstream_st*

namespace fusedmoe {
/// A CUDA stream (cudaStream_t); nullptr is the legacy default stream. Every op enqueues its
/// work on the caller's stream and never synchronizes the host.
using Stream = CUstream_st*;
}  // namespace fusedmoe
