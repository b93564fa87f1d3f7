#include "bench/cublaslt.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "fusedmoe/error.hpp"

namespace fusedmoe::bench {
namespace {

// The soname of the toolkit the binary was built with, then the toolkit's own library folder
// (not always in the loader's path), then any version.
void* open_library(std::string* tried) {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::string candidates[] = {soname,
#if defined(FMOE_CUDA_LIBRARY_DIR)
                              std::string(FMOE_CUDA_LIBRARY_DIR) + "/" + soname,
#endif
                              "libcublasLt.so"};
  for (const std::string& name : candidates) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* err = dlerror();
    *tried += "\n  " + name + ": " + (err ? err : "not found");
  }
  return nullptr;
}

template <class Fn>
void load(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  FMOE_REQUIRE(fn, "cuBLASLt was loaded but has no %s (a cuBLAS older than %d?)", name,
               CUBLAS_VER_MAJOR);
}

CublasLt load_all() {
  std::string tried;
  void* lib = open_library(&tried);
  FMOE_REQUIRE(lib, "the GEMM ceiling needs cuBLASLt (the dense FP8/BF16 rate) and it could not be "
               "loaded; tried:%s", tried.c_str());
  CublasLt t{};
  load(lib, "cublasLtCreate", t.create);
  load(lib, "cublasLtDestroy", t.destroy);
  load(lib, "cublasLtMatmulDescCreate", t.matmul_desc_create);
  load(lib, "cublasLtMatmulDescDestroy", t.matmul_desc_destroy);
  load(lib, "cublasLtMatmulDescSetAttribute", t.matmul_desc_set_attribute);
  load(lib, "cublasLtMatrixLayoutCreate", t.matrix_layout_create);
  load(lib, "cublasLtMatrixLayoutDestroy", t.matrix_layout_destroy);
  load(lib, "cublasLtMatmulPreferenceCreate", t.preference_create);
  load(lib, "cublasLtMatmulPreferenceDestroy", t.preference_destroy);
  load(lib, "cublasLtMatmulPreferenceSetAttribute", t.preference_set_attribute);
  load(lib, "cublasLtMatmulAlgoGetHeuristic", t.algo_get_heuristic);
  load(lib, "cublasLtMatmul", t.matmul);
  return t;  // the library stays loaded for the process's life
}

}  // namespace

const CublasLt& cublaslt() {
  static std::mutex mu;
  static bool loaded = false;
  static CublasLt table{};
  std::lock_guard<std::mutex> lock(mu);
  if (!loaded) {
    table = load_all();  // throws: the next call tries again and says why again
    loaded = true;
  }
  return table;
}

}  // namespace fusedmoe::bench
