// cuBLASLt, loaded on first use with dlopen: only the benchmark ceilings need it (the dense GEMM
// rate), so the fusedmoe binary neither links it nor needs it to start (214 MB and 0.1 s saved on
// every command, and `fusedmoe info` runs on machines without the CUDA toolkit). The types come
// from cublasLt.h; the functions through this table.
#pragma once

#include <cublasLt.h>

namespace fusedmoe::bench {

struct CublasLt {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtMatmulDescCreate) matmul_desc_create;
  decltype(&cublasLtMatmulDescDestroy) matmul_desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute;
  decltype(&cublasLtMatrixLayoutCreate) matrix_layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) matrix_layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&cublasLtMatmul) matmul;
};

/// The loaded library (once per process). Throws fusedmoe::Error naming the library, where it
/// was looked for and why dlopen/dlsym failed.
const CublasLt& cublaslt();

}  // namespace fusedmoe::bench
