// fusedmoe._fusedmoe: the nanobind extension behind the Python package `fusedmoe`.
//
// Tensors come in by DLPack (nb::ndarray) and become fusedmoe::TensorRef: the element type from
// the DLPack dtype, shape and strides (in elements) as given, the device from the DLPack device.
// A 1-byte unsigned tensor (torch.uint8, numpy uint8) has no type of its own: it is taken as the
// codes of the byte type the argument expects (e4m3 weights, e2m1x2 NVFP4 values, ...). A tuple
// (array, DType) overrides the element type of a same-sized storage (the Python side sends
// torch.float8_e4m3fn tensors as uint8 views tagged DType.e4m3, since not every torch exports
// float8 by DLPack). Every bad argument raises fusedmoe.Error (fusedmoe::Error) with the op, the
// argument and expected vs actual; arguments of GPU ops are checked to be in CUDA memory here,
// before anything touches a GPU.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/tensor_check.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/device.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/gemv.hpp"
#include "fusedmoe/grouped_gemm.hpp"
#include "fusedmoe/layer.hpp"
#include "fusedmoe/moe.hpp"
#include "fusedmoe/norm.hpp"
#include "fusedmoe/rope.hpp"
#include "fusedmoe/types.hpp"
#if FMOE_PY_HAS_CHECKPOINT
#include "fusedmoe/checkpoint.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;
using namespace fusedmoe;

namespace {

#if defined(FMOE_HAS_CUDA)
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

// ---- DLPack -> TensorRef -------------------------------------------------------------------------

/// Where an argument must live.
enum class Place { cpu, cuda };

/// How a 1-byte unsigned tensor is read for an argument; `none` rejects it.
enum class ByteAs { none, e4m3, e2m1x2, ue8m0 };

// DLPack type codes (dlpack.h, DLDataTypeCode). The low-precision ones are numbered here rather
// than taken from nanobind, whose enum gained them only in recent releases.
namespace dl {
constexpr uint8_t kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kComplex = 5, kBool = 6;
constexpr uint8_t kFloat8_e4m3fn = 10, kFloat8_e5m2 = 12, kFloat8_e8m0fnu = 14, kFloat4_e2m1fn = 17;
}  // namespace dl

std::string dlpack_dtype_name(nb::dlpack::dtype d) {
  std::string s;
  switch (d.code) {
    case dl::kInt: s = strf("int%d", int(d.bits)); break;
    case dl::kUInt: s = strf("uint%d", int(d.bits)); break;
    case dl::kFloat: s = strf("float%d", int(d.bits)); break;
    case dl::kBfloat: s = strf("bfloat%d", int(d.bits)); break;
    case dl::kComplex: s = strf("complex%d", int(d.bits)); break;
    case dl::kBool: s = "bool"; break;
    case dl::kFloat8_e4m3fn: s = "float8_e4m3fn"; break;
    case dl::kFloat8_e5m2: s = "float8_e5m2"; break;
    case dl::kFloat8_e8m0fnu: s = "float8_e8m0fnu"; break;
    case dl::kFloat4_e2m1fn: s = "float4_e2m1fn"; break;
    default: s = strf("DLPack type code %d of %d bits", int(d.code), int(d.bits)); break;
  }
  if (d.lanes != 1) s += strf(" x%d lanes", int(d.lanes));
  return s;
}

std::string expected_text(DType want, ByteAs byte_as) {
  if (want == DType::i64) return "i32 or i64";  // the only i64 argument (rope positions) takes both
  std::string s = dtype_name(want);
  if (byte_as != ByteAs::none) s += " (or uint8 codes)";
  return s;
}

// The fusedmoe element type of a DLPack dtype, or an Error naming the argument.
DType map_dtype(const char* op, const char* name, nb::dlpack::dtype d, DType want, ByteAs byte_as) {
  if (d.lanes == 1) {
    switch (d.code) {
      case dl::kFloat:
        if (d.bits == 32) return DType::f32;
        if (d.bits == 16) return DType::f16;
        break;
      case dl::kBfloat:
        if (d.bits == 16) return DType::bf16;
        break;
      case dl::kInt:
        if (d.bits == 32) return DType::i32;
        // int64 only where an op takes it (rope positions): elsewhere the op's message keeps
        // naming the DLPack type ("must be i32, got int64").
        if (d.bits == 64 && want == DType::i64) return DType::i64;
        break;
      case dl::kUInt:
        if (d.bits == 8) {
          switch (byte_as) {
            case ByteAs::e4m3: return DType::e4m3;
            case ByteAs::e2m1x2: return DType::e2m1x2;
            case ByteAs::ue8m0: return DType::ue8m0;
            case ByteAs::none: break;
          }
        }
        break;
      case dl::kFloat8_e4m3fn:
        if (d.bits == 8) return DType::e4m3;
        break;
      case dl::kFloat8_e8m0fnu:
        if (d.bits == 8) return DType::ue8m0;
        break;
      default: break;
    }
  }
  FMOE_REQUIRE(false, "%s: %s must be %s, got %s", op, name, expected_text(want, byte_as).c_str(),
               dlpack_dtype_name(d).c_str());
}

const char* place_name(Place p) { return p == Place::cuda ? "CUDA device memory" : "host (CPU) memory"; }

/// One tensor argument: what it must be and how to read it.
struct Spec {
  const char* op;
  const char* name;
  DType want;                 // for messages and the uint8 rule; the op checks the dtype itself
  ByteAs byte_as = ByteAs::none;
  Place place = Place::cuda;
  bool writable = false;
};

// Keeps the imported arrays (and so the producers' buffers) alive until the call returns.
struct Keep {
  std::vector<nb::ndarray<nb::ro>> ro;
  std::vector<nb::ndarray<>> rw;
};

std::string type_name_of(nb::handle h) {
  return nb::cast<std::string>(nb::str(h.type().attr("__qualname__")));
}

/// Converts a Python object (DLPack producer, buffer, DLPack capsule, or (object, DType)) into a
/// TensorRef. None gives an empty TensorRef (data == nullptr), which each op treats as "absent".
TensorRef tensor_arg(const Spec& s, nb::handle h, Keep& keep) {
  TensorRef t;
  if (h.is_none()) return t;
  std::optional<DType> override;
  nb::handle src = h;
  if (nb::isinstance<nb::tuple>(h)) {
    nb::tuple tup = nb::borrow<nb::tuple>(h);
    DType d{};
    FMOE_REQUIRE(nb::len(tup) == 2 && nb::try_cast<DType>(tup[1], d, false),
                 "%s: %s must be a tensor or a (tensor, fusedmoe.DType) pair, got a tuple of %zu",
                 s.op, s.name, size_t(nb::len(tup)));
    override = d;
    src = tup[0];
  }
  const void* data = nullptr;
  size_t ndim = 0;
  const int64_t* shape = nullptr;
  const int64_t* stride = nullptr;
  nb::dlpack::dtype dt{};
  int dev_type = 0, dev_id = 0;
  auto take = [&](auto& a) {
    data = a.data();
    ndim = a.ndim();
    shape = a.shape_ptr();
    stride = a.stride_ptr();
    dt = a.dtype();
    dev_type = a.device_type();
    dev_id = a.device_id();
  };
  if (s.writable) {
    nb::ndarray<> a;
    if (!nb::try_cast(src, a, false)) {
      nb::ndarray<nb::ro> r;
      FMOE_REQUIRE(!nb::try_cast(src, r, false), "%s: %s is read-only; it is written to", s.op, s.name);
      FMOE_REQUIRE(false, "%s: %s must be a tensor or array (DLPack or the buffer protocol), got %s",
                   s.op, s.name, type_name_of(src).c_str());
    }
    take(a);
    keep.rw.push_back(std::move(a));
  } else {
    nb::ndarray<nb::ro> a;
    FMOE_REQUIRE(nb::try_cast(src, a, false),
                 "%s: %s must be a tensor or array (DLPack or the buffer protocol), got %s", s.op,
                 s.name, type_name_of(src).c_str());
    take(a);
    keep.ro.push_back(std::move(a));
  }
  FMOE_REQUIRE(ndim <= size_t(TensorRef::kMaxDims), "%s: %s has %zu dimensions; at most %d", s.op,
               s.name, ndim, TensorRef::kMaxDims);
  if (override) {
    FMOE_REQUIRE(dt.lanes == 1 && size_t(dt.bits) == 8 * dtype_bytes(*override),
                 "%s: %s: a %s storage cannot hold %s elements (%zu bytes each)", s.op, s.name,
                 dlpack_dtype_name(dt).c_str(), dtype_name(*override), dtype_bytes(*override));
    t.dtype = *override;
  } else {
    t.dtype = map_dtype(s.op, s.name, dt, s.want, s.byte_as);
  }
  t.data = const_cast<void*>(data);
  t.ndim = int(ndim);
  for (size_t d = 0; d < ndim; ++d) {
    t.shape[d] = shape[d];
    t.stride[d] = stride ? stride[d] : 0;
  }
  if (!stride) {  // DLPack: no strides means row-major
    int64_t st = 1;
    for (int d = int(ndim) - 1; d >= 0; --d) {
      t.stride[d] = st;
      st *= t.shape[d];
    }
  }
  if (dev_type == nb::device::cuda::value) {
    t.device = Device::cuda;
    t.device_index = dev_id;
  } else if (dev_type == nb::device::cpu::value || dev_type == nb::device::cuda_host::value) {
    t.device = Device::cpu;  // pinned host memory is host memory
  } else {
    FMOE_REQUIRE(false, "%s: %s is in DLPack device type %d memory; fusedmoe takes %s", s.op,
                 s.name, dev_type, place_name(s.place));
  }
  if (s.place == Place::cuda)
    detail::check_on_device(s.op, s.name, t);
  else
    FMOE_REQUIRE(t.device == Device::cpu, "%s: %s must be in host (CPU) memory, got %s", s.op,
                 s.name, t.describe().c_str());
  return t;
}

/// A workspace: any CUDA tensor, contiguous; its size in bytes.
TensorRef workspace_arg(const char* op, nb::handle h, Keep& keep, size_t& bytes) {
  FMOE_REQUIRE(!h.is_none(), "%s: workspace is missing", op);
  nb::ndarray<> a;
  FMOE_REQUIRE(nb::try_cast(h, a, false),
               "%s: workspace must be a writable CUDA tensor (DLPack), got %s", op,
               type_name_of(h).c_str());
  TensorRef t;
  t.data = a.data();
  t.dtype = DType::e4m3;  // bytes; only the size and place matter
  t.ndim = 1;
  t.shape[0] = int64_t(a.nbytes());
  t.stride[0] = 1;
  t.device = a.device_type() == nb::device::cuda::value ? Device::cuda : Device::cpu;
  t.device_index = a.device_id();
  detail::check_on_device(op, "workspace", t);
  bool dense = true;
  int64_t expect = 1;
  for (int d = int(a.ndim()) - 1; d >= 0; --d) {
    if (a.shape(size_t(d)) != 1 && a.stride(size_t(d)) != expect) dense = false;
    expect *= a.shape(size_t(d));
  }
  FMOE_REQUIRE(dense, "%s: workspace must be contiguous", op);
  bytes = a.nbytes();
  keep.rw.push_back(std::move(a));
  return t;
}

#if defined(FMOE_HAS_CUDA)
Stream as_stream(uintptr_t s) { return reinterpret_cast<Stream>(s); }
#endif

#if !defined(FMOE_HAS_CUDA)
[[noreturn]] void no_cuda(const char* what) {
  FMOE_REQUIRE(false,
               "%s: this build of fusedmoe has no CUDA kernels (configured without nvcc or with "
               "-DFMOE_WITH_CUDA=OFF); rebuild with the CUDA toolkit to run it", what);
}
#endif

// ---- numpy results -------------------------------------------------------------------------------

template <class T>
using NpArray = nb::ndarray<nb::numpy, T>;

template <class T>
NpArray<T> new_array(std::initializer_list<size_t> shape) {
  size_t n = 1;
  for (size_t s : shape) n *= s;
  T* p = new T[n > 0 ? n : 1]();
  nb::capsule owner(p, [](void* q) noexcept { delete[] static_cast<T*>(q); });
  return NpArray<T>(p, shape, owner);
}

/// A host array argument of the CPU helpers: in host memory, `want`, row-major.
TensorRef host_arg(const char* op, const char* name, nb::handle h, DType want, Keep& keep,
                   ByteAs byte_as = ByteAs::none) {
  const Spec s{op, name, want, byte_as, Place::cpu, false};
  TensorRef t = tensor_arg(s, h, keep);
  FMOE_REQUIRE(t.data != nullptr || t.numel() == 0, "%s: %s is missing", op, name);
  detail::check_dtype(op, name, t, want);
  detail::check_contiguous(op, name, t);
  return t;
}

void require_ndim(const char* op, const char* name, const TensorRef& t, int lo, int hi) {
  FMOE_REQUIRE(t.ndim >= lo && t.ndim <= hi, "%s: %s must have %s dimensions, got %s", op, name,
               lo == hi ? strf("%d", lo).c_str() : strf("%d to %d", lo, hi).c_str(),
               t.describe().c_str());
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- the layer -----------------------------------------------------------------------------------

constexpr const char* kLayerOp = "MoeLayer";

MoeLayerWeights layer_weights(const MoeConfig& cfg, nb::handle w13, nb::handle w13_scale,
                              nb::handle w2, nb::handle w2_scale, nb::handle b13, nb::handle b2,
                              nb::handle routing_bias, nb::handle shared_w13,
                              nb::handle shared_w13_scale, nb::handle shared_w2,
                              nb::handle shared_w2_scale, nb::handle shared_gate,
                              nb::handle w13_scale_2, nb::handle w2_scale_2,
                              nb::handle shared_w13_scale_2, nb::handle shared_w2_scale_2,
                              Keep& keep) {
  // Values and block scales by the weight format (uint8 tensors are read as the codes):
  // bf16; fp8 e4m3 + f32 128x128 scales; nvfp4 e2m1x2 + e4m3 per 16 + f32 globals (scale_2);
  // mxfp4 e2m1x2 + ue8m0 per 32.
  const Precision p = cfg.weight_precision;
  const bool fp4 = p == Precision::nvfp4 || p == Precision::mxfp4;
  const DType wt = p == Precision::bf16 ? DType::bf16 : fp4 ? DType::e2m1x2 : DType::e4m3;
  const ByteAs wb = fp4 ? ByteAs::e2m1x2 : ByteAs::e4m3;
  const DType st = p == Precision::nvfp4 ? DType::e4m3 : p == Precision::mxfp4 ? DType::ue8m0 : DType::f32;
  const ByteAs sb = p == Precision::nvfp4 ? ByteAs::e4m3 : p == Precision::mxfp4 ? ByteAs::ue8m0 : ByteAs::none;
  auto weight = [&](const char* name, nb::handle h) {
    return tensor_arg(Spec{kLayerOp, name, wt, wb}, h, keep);
  };
  auto scale = [&](const char* name, nb::handle h) {
    return tensor_arg(Spec{kLayerOp, name, st, sb}, h, keep);
  };
  auto f32 = [&](const char* name, nb::handle h) {
    return tensor_arg(Spec{kLayerOp, name, DType::f32}, h, keep);
  };
  auto bf16 = [&](const char* name, nb::handle h) {
    return tensor_arg(Spec{kLayerOp, name, DType::bf16}, h, keep);
  };
  MoeLayerWeights w;
  w.w13 = weight("w13", w13);
  w.w13_scale = scale("w13_scale", w13_scale);
  w.w13_scale_2 = f32("w13_scale_2", w13_scale_2);
  w.w2 = weight("w2", w2);
  w.w2_scale = scale("w2_scale", w2_scale);
  w.w2_scale_2 = f32("w2_scale_2", w2_scale_2);
  w.b13 = f32("b13", b13);
  w.b2 = f32("b2", b2);
  w.routing_bias = f32("routing_bias", routing_bias);
  w.shared_w13 = weight("shared_w13", shared_w13);
  w.shared_w13_scale = scale("shared_w13_scale", shared_w13_scale);
  w.shared_w13_scale_2 = f32("shared_w13_scale_2", shared_w13_scale_2);
  w.shared_w2 = weight("shared_w2", shared_w2);
  w.shared_w2_scale = scale("shared_w2_scale", shared_w2_scale);
  w.shared_w2_scale_2 = f32("shared_w2_scale_2", shared_w2_scale_2);
  w.shared_gate = bf16("shared_gate", shared_gate);
  FMOE_REQUIRE(w.w13.data != nullptr, "%s: w13 is required", kLayerOp);
  FMOE_REQUIRE(w.w2.data != nullptr, "%s: w2 is required", kLayerOp);
  return w;
}

/// The Python-visible layer: the library's MoeLayer (CUDA builds) and its config.
class PyLayer {
 public:
  PyLayer(const MoeConfig& cfg, nb::handle w13, nb::handle w13_scale, nb::handle w2,
          nb::handle w2_scale, nb::handle b13, nb::handle b2, nb::handle routing_bias,
          nb::handle shared_w13, nb::handle shared_w13_scale, nb::handle shared_w2,
          nb::handle shared_w2_scale, nb::handle shared_gate, nb::handle w13_scale_2,
          nb::handle w2_scale_2, nb::handle shared_w13_scale_2, nb::handle shared_w2_scale_2,
          uintptr_t stream)
      : cfg_(cfg) {
    cfg.validate();
    Keep keep;
    const MoeLayerWeights w =
        layer_weights(cfg, w13, w13_scale, w2, w2_scale, b13, b2, routing_bias, shared_w13,
                      shared_w13_scale, shared_w2, shared_w2_scale, shared_gate, w13_scale_2,
                      w2_scale_2, shared_w13_scale_2, shared_w2_scale_2, keep);
    device_ = w.w13.device_index;
#if defined(FMOE_HAS_CUDA)
    nb::gil_scoped_release nogil;
    layer_ = std::make_unique<MoeLayer>(cfg, w, as_stream(stream));
#else
    (void)stream;
    no_cuda(kLayerOp);
#endif
  }

  const MoeConfig& config() const { return cfg_; }
  int device() const { return device_; }

#if defined(FMOE_HAS_CUDA)
  const MoeLayer& layer() const { return *layer_; }
  size_t prepared_bytes() const { return layer_->prepared_bytes(); }
  size_t workspace_size(int max_tokens, ReductionMode mode) const {
    FMOE_REQUIRE(max_tokens >= 0, "%s: max_tokens must be >= 0, got %d", kLayerOp, max_tokens);
    return layer_->workspace_size(max_tokens, mode);
  }
#else
  size_t prepared_bytes() const { no_cuda(kLayerOp); }
  size_t workspace_size(int, ReductionMode) const { no_cuda(kLayerOp); }
#endif

  /// The forward arguments, converted (and checked to be CUDA tensors).
  MoeForwardArgs args(nb::handle x, nb::handle router_logits, nb::handle y,
                      nb::handle topk_ids, nb::handle topk_weights, ReductionMode mode,
                      bool validate_routing, Keep& keep, nb::handle x_fp8 = nb::none(),
                      nb::handle x_fp8_scales = nb::none()) const {
    MoeForwardArgs a;
    a.x = tensor_arg(Spec{kLayerOp, "x", DType::bf16}, x, keep);
    a.x_fp8 = tensor_arg(Spec{kLayerOp, "x_fp8", DType::e4m3, ByteAs::e4m3}, x_fp8, keep);
    a.x_fp8_scales = tensor_arg(Spec{kLayerOp, "x_fp8_scales", DType::f32}, x_fp8_scales, keep);
    a.y = tensor_arg(Spec{kLayerOp, "y", DType::bf16, ByteAs::none, Place::cuda, true}, y, keep);
    a.routing_given = !topk_ids.is_none() || !topk_weights.is_none();
    if (a.routing_given) {
      FMOE_REQUIRE(!topk_ids.is_none() && !topk_weights.is_none(),
                   "%s: routing given by the caller needs both topk_ids and topk_weights", kLayerOp);
      FMOE_REQUIRE(router_logits.is_none(),
                   "%s: give either router_logits or topk_ids/topk_weights, not both", kLayerOp);
      a.topk_ids = tensor_arg(Spec{kLayerOp, "topk_ids", DType::i32}, topk_ids, keep);
      a.topk_weights = tensor_arg(Spec{kLayerOp, "topk_weights", DType::f32}, topk_weights, keep);
    } else {
      FMOE_REQUIRE(!router_logits.is_none(),
                   "%s: router_logits is missing (or give topk_ids and topk_weights)", kLayerOp);
      a.router_logits = tensor_arg(Spec{kLayerOp, "router_logits", DType::f32}, router_logits, keep);
    }
    FMOE_REQUIRE(a.x.data != nullptr || a.x.numel() == 0 || a.x_fp8.ndim > 0,
                 "%s: x is missing (or give x_fp8 and x_fp8_scales)", kLayerOp);
    FMOE_REQUIRE(a.y.data != nullptr || a.y.numel() == 0, "%s: y is missing", kLayerOp);
    a.mode = mode;
    a.validate_routing = validate_routing;
    return a;
  }

  void forward(nb::handle x, nb::handle router_logits, nb::handle y, nb::handle workspace,
               uintptr_t stream, ReductionMode mode, nb::handle topk_ids, nb::handle topk_weights,
               bool validate_routing, nb::handle x_fp8, nb::handle x_fp8_scales) const {
    Keep keep;
    const MoeForwardArgs a = args(x, router_logits, y, topk_ids, topk_weights, mode,
                                  validate_routing, keep, x_fp8, x_fp8_scales);
    size_t bytes = 0;
    const TensorRef ws = workspace_arg(kLayerOp, workspace, keep, bytes);
#if defined(FMOE_HAS_CUDA)
    nb::gil_scoped_release nogil;
    layer_->forward(a, ws.data, bytes, as_stream(stream));
#else
    (void)a;
    (void)ws;
    (void)stream;
    no_cuda(kLayerOp);
#endif
  }

  int dropped_routes(nb::handle workspace, uintptr_t stream) const {
    Keep keep;
    size_t bytes = 0;
    const TensorRef ws = workspace_arg(kLayerOp, workspace, keep, bytes);
#if defined(FMOE_HAS_CUDA)
    nb::gil_scoped_release nogil;
    return layer_->dropped_routes(ws.data, as_stream(stream));
#else
    (void)ws;
    (void)stream;
    no_cuda(kLayerOp);
#endif
  }

  /// Host time of the C++ forward call alone: `iters` calls on pre-converted arguments, timed
  /// with a steady clock (no synchronization inside). Nanoseconds per call. For bench/.
  double host_ns_per_forward(nb::handle x, nb::handle router_logits, nb::handle y,
                             nb::handle workspace, uintptr_t stream, ReductionMode mode,
                             int iters) const {
    FMOE_REQUIRE(iters >= 1, "%s: iters must be >= 1, got %d", kLayerOp, iters);
    Keep keep;
    const MoeForwardArgs a = args(x, router_logits, y, nb::none(), nb::none(), mode, false, keep);
    size_t bytes = 0;
    const TensorRef ws = workspace_arg(kLayerOp, workspace, keep, bytes);
#if defined(FMOE_HAS_CUDA)
    nb::gil_scoped_release nogil;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) layer_->forward(a, ws.data, bytes, as_stream(stream));
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / iters;
#else
    (void)a;
    (void)ws;
    (void)stream;
    no_cuda(kLayerOp);
#endif
  }

 private:
  MoeConfig cfg_;
  int device_ = 0;
#if defined(FMOE_HAS_CUDA)
  std::unique_ptr<MoeLayer> layer_;
#endif
};

// ---- RMSNorm + quantize --------------------------------------------------------------------------

/// out_format ("bf16", "fp8", "nvfp4") says what out (and out_scale) must be: a uint8 out is read as
/// e4m3 codes for "fp8" and as e2m1 pairs for "nvfp4", so the format is checked here.
void py_rmsnorm_quant(nb::handle x, nb::handle weight, float eps, const std::string& out_format,
                      nb::handle out, nb::handle out_scale, nb::handle residual,
                      nb::handle global_scale, nb::handle inv_rms, bool pdl, uintptr_t stream) {
  const char* op = "rmsnorm_quant";
  const bool f8 = out_format == "fp8", nv = out_format == "nvfp4";
  FMOE_REQUIRE(f8 || nv || out_format == "bf16", "%s: out_format must be 'bf16', 'fp8' or 'nvfp4', got '%s'",
               op, out_format.c_str());
  const DType out_t = f8 ? DType::e4m3 : nv ? DType::e2m1x2 : DType::bf16;
  const ByteAs out_bytes = f8 ? ByteAs::e4m3 : nv ? ByteAs::e2m1x2 : ByteAs::none;
  Keep keep;
  RmsNormQuantArgs a;
  a.x = tensor_arg(Spec{op, "x", DType::bf16}, x, keep);
  a.weight = tensor_arg(Spec{op, "weight", DType::bf16}, weight, keep);
  a.eps = eps;
  a.out = tensor_arg(Spec{op, "out", out_t, out_bytes, Place::cuda, true}, out, keep);
  FMOE_REQUIRE(a.out.data == nullptr || a.out.dtype == out_t, "%s: out_format '%s' needs out of dtype %s, got %s",
               op, out_format.c_str(), expected_text(out_t, out_bytes).c_str(), a.out.describe().c_str());
  a.out_scale = tensor_arg(Spec{op, "out_scale", nv ? DType::e4m3 : DType::f32, nv ? ByteAs::e4m3 : ByteAs::none,
                                Place::cuda, true}, out_scale, keep);
  a.residual = tensor_arg(Spec{op, "residual", DType::bf16, ByteAs::none, Place::cuda, true}, residual, keep);
  a.global_scale = tensor_arg(Spec{op, "global_scale", DType::f32}, global_scale, keep);
  a.inv_rms = tensor_arg(Spec{op, "inv_rms", DType::f32, ByteAs::none, Place::cuda, true}, inv_rms, keep);
  a.pdl = pdl;
#if defined(FMOE_HAS_CUDA)
  nb::gil_scoped_release nogil;
  rmsnorm_quant(a, as_stream(stream));
#else
  (void)stream;
  no_cuda(op);
#endif
}

// ---- the NVFP4 GEMV ------------------------------------------------------------------------------

void py_gemv_nvfp4(nb::handle a, nb::handle a_scale, nb::handle a_global, nb::handle b,
                   nb::handle c, nb::handle b_scale, nb::handle b_global, bool pdl,
                   uintptr_t stream) {
  const char* op = "gemv_nvfp4";
  Keep keep;
  GemvNvfp4Args g;
  g.a = tensor_arg(Spec{op, "a", DType::e2m1x2, ByteAs::e2m1x2}, a, keep);
  g.a_scale = tensor_arg(Spec{op, "a_scale", DType::e4m3, ByteAs::e4m3}, a_scale, keep);
  g.a_global = tensor_arg(Spec{op, "a_global", DType::f32}, a_global, keep);
  g.b = tensor_arg(Spec{op, "b", DType::e2m1x2, ByteAs::e2m1x2}, b, keep);
  g.b_scale = tensor_arg(Spec{op, "b_scale", DType::e4m3, ByteAs::e4m3}, b_scale, keep);
  g.b_global = tensor_arg(Spec{op, "b_global", DType::f32}, b_global, keep);
  g.c = tensor_arg(Spec{op, "c", DType::f32, ByteAs::none, Place::cuda, true}, c, keep);
  g.pdl = pdl;
#if defined(FMOE_HAS_CUDA)
  nb::gil_scoped_release nogil;
  gemv_nvfp4(g, as_stream(stream));
#else
  (void)stream;
  no_cuda(op);
#endif
}

void py_moe_gemv_nvfp4(nb::handle w, nb::handle w_scale, nb::handle w_global, nb::handle x,
                       nb::handle topk_ids, nb::handle topk_weights, nb::handle y,
                       nb::handle bad_id_count, bool pdl, uintptr_t stream) {
  const char* op = "moe_gemv_nvfp4";
  Keep keep;
  MoeGemvNvfp4Args g;
  g.w = tensor_arg(Spec{op, "w", DType::e2m1x2, ByteAs::e2m1x2}, w, keep);
  g.w_scale = tensor_arg(Spec{op, "w_scale", DType::e4m3, ByteAs::e4m3}, w_scale, keep);
  g.w_global = tensor_arg(Spec{op, "w_global", DType::f32}, w_global, keep);
  g.x = tensor_arg(Spec{op, "x", DType::bf16}, x, keep);
  g.topk_ids = tensor_arg(Spec{op, "topk_ids", DType::i32}, topk_ids, keep);
  g.topk_weights = tensor_arg(Spec{op, "topk_weights", DType::f32}, topk_weights, keep);
  g.y = tensor_arg(Spec{op, "y", DType::f32, ByteAs::none, Place::cuda, true}, y, keep);
  g.bad_id_count =
      tensor_arg(Spec{op, "bad_id_count", DType::i32, ByteAs::none, Place::cuda, true}, bad_id_count, keep);
  g.pdl = pdl;
#if defined(FMOE_HAS_CUDA)
  nb::gil_scoped_release nogil;
  moe_gemv_nvfp4(g, as_stream(stream));
#else
  (void)stream;
  no_cuda(op);
#endif
}

// ---- the NVFP4 grouped GEMM ----------------------------------------------------------------------

constexpr const char* kGroupedOp = "Nvfp4GroupedGemm";

/// The library's Nvfp4GroupedGemm (CUDA builds): B prepared once by the constructor, calls on
/// caller-given A, offsets, c and workspace. fusedmoe.Nvfp4GroupedGemm wraps it for torch (it
/// allocates c and owns a growing workspace).
class PyNvfp4GroupedGemm {
 public:
  PyNvfp4GroupedGemm(nb::handle b, nb::handle b_scale, nb::handle b_global, uintptr_t stream) {
    Keep keep;
    const TensorRef tb = tensor_arg(Spec{kGroupedOp, "b", DType::e2m1x2, ByteAs::e2m1x2}, b, keep);
    const TensorRef ts = tensor_arg(Spec{kGroupedOp, "b_scale", DType::e4m3, ByteAs::e4m3}, b_scale, keep);
    const TensorRef tg = tensor_arg(Spec{kGroupedOp, "b_global", DType::f32}, b_global, keep);
    FMOE_REQUIRE(tb.data != nullptr, "%s: b is required", kGroupedOp);
    FMOE_REQUIRE(ts.data != nullptr, "%s: b_scale is required", kGroupedOp);
    FMOE_REQUIRE(tg.data != nullptr, "%s: b_global is required", kGroupedOp);
    device_ = tb.device_index;
#if defined(FMOE_HAS_CUDA)
    nb::gil_scoped_release nogil;
    gemm_ = std::make_unique<Nvfp4GroupedGemm>(tb, ts, tg, as_stream(stream));
#else
    (void)stream;
    no_cuda(kGroupedOp);
#endif
  }

  int device() const { return device_; }
#if defined(FMOE_HAS_CUDA)
  int groups() const { return gemm_->groups(); }
  int n() const { return gemm_->n(); }
  int k() const { return gemm_->k(); }
  size_t prepared_bytes() const { return gemm_->prepared_bytes(); }
  size_t workspace_size(int max_rows) const {
    FMOE_REQUIRE(max_rows >= 0, "%s: max_rows must be >= 0, got %d", kGroupedOp, max_rows);
    return gemm_->workspace_size(max_rows);
  }
#else
  int groups() const { no_cuda(kGroupedOp); }
  int n() const { no_cuda(kGroupedOp); }
  int k() const { no_cuda(kGroupedOp); }
  size_t prepared_bytes() const { no_cuda(kGroupedOp); }
  size_t workspace_size(int) const { no_cuda(kGroupedOp); }
#endif

  void run(nb::handle a, nb::handle a_scale, nb::handle a_global, nb::handle offsets, nb::handle c,
           nb::handle workspace, uintptr_t stream, bool validate_offsets) const {
    Keep keep;
    Nvfp4GroupedGemmArgs g;
    g.a = tensor_arg(Spec{kGroupedOp, "a", DType::e2m1x2, ByteAs::e2m1x2}, a, keep);
    g.a_scale = tensor_arg(Spec{kGroupedOp, "a_scale", DType::e4m3, ByteAs::e4m3}, a_scale, keep);
    g.a_global = tensor_arg(Spec{kGroupedOp, "a_global", DType::f32}, a_global, keep);
    g.offsets = tensor_arg(Spec{kGroupedOp, "offsets", DType::i32}, offsets, keep);
    g.c = tensor_arg(Spec{kGroupedOp, "c", DType::bf16, ByteAs::none, Place::cuda, true}, c, keep);
    // A missing tensor would reach the op as a null pointer of shape []: name it here instead.
    FMOE_REQUIRE(!a.is_none(), "%s: a is missing", kGroupedOp);
    FMOE_REQUIRE(!a_scale.is_none(), "%s: a_scale is missing", kGroupedOp);
    FMOE_REQUIRE(!offsets.is_none(), "%s: offsets is missing", kGroupedOp);
    FMOE_REQUIRE(!c.is_none(), "%s: c is missing", kGroupedOp);
    g.validate_offsets = validate_offsets;
    size_t bytes = 0;
    const TensorRef ws = workspace_arg(kGroupedOp, workspace, keep, bytes);
#if defined(FMOE_HAS_CUDA)
    nb::gil_scoped_release nogil;
    gemm_->run(g, ws.data, bytes, as_stream(stream));
#else
    (void)ws;
    (void)stream;
    no_cuda(kGroupedOp);
#endif
  }

  bool offsets_clamped(nb::handle workspace, uintptr_t stream) const {
    Keep keep;
    size_t bytes = 0;
    const TensorRef ws = workspace_arg(kGroupedOp, workspace, keep, bytes);
#if defined(FMOE_HAS_CUDA)
    nb::gil_scoped_release nogil;
    return gemm_->offsets_clamped(ws.data, as_stream(stream));
#else
    (void)ws;
    (void)stream;
    no_cuda(kGroupedOp);
#endif
  }

 private:
  int device_ = 0;
#if defined(FMOE_HAS_CUDA)
  std::unique_ptr<Nvfp4GroupedGemm> gemm_;
#endif
};

// ---- CPU codecs and quantizers (numpy in, numpy out) ---------------------------------------------

/// [rows, cols] or [E, rows, cols] -> (E or 1, rows, cols).
void matrix_dims(const TensorRef& t, int64_t& E, int64_t& rows, int64_t& cols) {
  E = t.ndim == 3 ? t.shape[0] : 1;
  rows = t.shape[t.ndim - 2];
  cols = t.shape[t.ndim - 1];
}

std::pair<nb::object, nb::object> py_quantize_fp8_block(nb::handle w_in) {
  const char* op = "quantize_fp8_block";
  Keep keep;
  const TensorRef w = host_arg(op, "w", w_in, DType::f32, keep);
  require_ndim(op, "w", w, 2, 3);
  int64_t E, R, C;
  matrix_dims(w, E, R, C);
  const int64_t RB = cdiv(R, 128), CB = cdiv(C, 128);
  auto q3 = new_array<uint8_t>({size_t(E), size_t(R), size_t(C)});
  auto s3 = new_array<float>({size_t(E), size_t(RB), size_t(CB)});
  {
    nb::gil_scoped_release nogil;
    for (int64_t e = 0; e < E; ++e)
      fmt::quantize_fp8_block_128x128(static_cast<const float*>(w.data) + e * R * C, R, C,
                                      q3.data() + e * R * C, s3.data() + e * RB * CB);
  }
  if (w.ndim == 3) return {nb::cast(q3), nb::cast(s3)};
  // 2-d in, 2-d out: numpy views of the same buffers.
  return {nb::cast(q3).attr("reshape")(R, C), nb::cast(s3).attr("reshape")(RB, CB)};
}

NpArray<float> py_dequantize_fp8_block(nb::handle q_in, nb::handle s_in) {
  const char* op = "dequantize_fp8_block";
  Keep keep;
  const TensorRef q = host_arg(op, "q", q_in, DType::e4m3, keep, ByteAs::e4m3);
  require_ndim(op, "q", q, 2, 3);
  int64_t E, R, C;
  matrix_dims(q, E, R, C);
  const TensorRef s = host_arg(op, "scale_inv", s_in, DType::f32, keep);
  if (q.ndim == 3)
    detail::check_shape(op, "scale_inv", s, {E, cdiv(R, 128), cdiv(C, 128)});
  else
    detail::check_shape(op, "scale_inv", s, {cdiv(R, 128), cdiv(C, 128)});
  auto out = q.ndim == 3 ? new_array<float>({size_t(E), size_t(R), size_t(C)})
                         : new_array<float>({size_t(R), size_t(C)});
  const int64_t SB = cdiv(R, 128) * cdiv(C, 128);
  {
    nb::gil_scoped_release nogil;
    for (int64_t e = 0; e < E; ++e)
      fmt::dequantize_fp8_block_128x128(static_cast<const uint8_t*>(q.data) + e * R * C,
                                        static_cast<const float*>(s.data) + e * SB, R, C,
                                        out.data() + e * R * C);
  }
  return out;
}

std::pair<NpArray<uint8_t>, NpArray<float>> py_quantize_fp8_per_token(nb::handle x_in, int block) {
  const char* op = "quantize_fp8_per_token";
  Keep keep;
  const TensorRef x = host_arg(op, "x", x_in, DType::f32, keep);
  require_ndim(op, "x", x, 2, 2);
  FMOE_REQUIRE(block >= 1, "%s: block must be >= 1, got %d", op, block);
  const int64_t R = x.shape[0], C = x.shape[1], CB = cdiv(C, block);
  auto q = new_array<uint8_t>({size_t(R), size_t(C)});
  auto s = new_array<float>({size_t(R), size_t(CB)});
  {
    nb::gil_scoped_release nogil;
    fmt::quantize_fp8_per_token(static_cast<const float*>(x.data), R, C, block, q.data(), s.data());
  }
  return {q, s};
}

NpArray<float> py_dequantize_fp8_per_token(nb::handle q_in, nb::handle s_in) {
  const char* op = "dequantize_fp8_per_token";
  Keep keep;
  const TensorRef q = host_arg(op, "q", q_in, DType::e4m3, keep, ByteAs::e4m3);
  require_ndim(op, "q", q, 2, 2);
  const TensorRef s = host_arg(op, "scales", s_in, DType::f32, keep);
  const int64_t R = q.shape[0], C = q.shape[1];
  detail::check_shape(op, "scales", s, {R, cdiv(C, 128)});
  auto out = new_array<float>({size_t(R), size_t(C)});
  {
    nb::gil_scoped_release nogil;
    fmt::dequantize_fp8_per_token_128(static_cast<const uint8_t*>(q.data),
                                      static_cast<const float*>(s.data), R, C, out.data());
  }
  return out;
}

std::tuple<NpArray<uint8_t>, NpArray<uint8_t>, float> py_quantize_nvfp4(nb::handle x_in,
                                                                        std::optional<float> global) {
  const char* op = "quantize_nvfp4";
  Keep keep;
  const TensorRef x = host_arg(op, "x", x_in, DType::f32, keep);
  require_ndim(op, "x", x, 2, 2);
  const int64_t R = x.shape[0], C = x.shape[1];
  FMOE_REQUIRE(C % 16 == 0, "%s: x has %lld columns; NVFP4 needs a multiple of 16", op, (long long)C);
  const float* xp = static_cast<const float*>(x.data);
  const float g = global ? *global : fmt::nvfp4_global_scale(fmt::abs_max(xp, R * C));
  FMOE_REQUIRE(g > 0.0f && std::isfinite(g), "%s: global_scale must be finite and > 0, got %g", op,
               double(g));
  auto packed = new_array<uint8_t>({size_t(R), size_t(C / 2)});
  auto scales = new_array<uint8_t>({size_t(R), size_t(C / 16)});
  {
    nb::gil_scoped_release nogil;
    fmt::quantize_nvfp4(xp, R, C, g, packed.data(), scales.data());
  }
  return {packed, scales, g};
}

NpArray<float> py_dequantize_nvfp4(nb::handle p_in, nb::handle s_in, float global) {
  const char* op = "dequantize_nvfp4";
  Keep keep;
  const TensorRef p = host_arg(op, "packed", p_in, DType::e2m1x2, keep, ByteAs::e2m1x2);
  require_ndim(op, "packed", p, 2, 2);
  const TensorRef s = host_arg(op, "block_scales", s_in, DType::e4m3, keep, ByteAs::e4m3);
  const int64_t R = p.shape[0], C = 2 * p.shape[1];
  FMOE_REQUIRE(C % 16 == 0, "%s: packed has %lld values per row; NVFP4 needs a multiple of 16", op,
               (long long)C);
  detail::check_shape(op, "block_scales", s, {R, C / 16});
  auto out = new_array<float>({size_t(R), size_t(C)});
  {
    nb::gil_scoped_release nogil;
    fmt::dequantize_nvfp4(static_cast<const uint8_t*>(p.data), static_cast<const uint8_t*>(s.data),
                          global, R, C, out.data());
  }
  return out;
}

std::tuple<NpArray<uint8_t>, NpArray<uint8_t>> py_quantize_mxfp4(nb::handle x_in) {
  const char* op = "quantize_mxfp4";
  Keep keep;
  const TensorRef x = host_arg(op, "x", x_in, DType::f32, keep);
  require_ndim(op, "x", x, 2, 2);
  const int64_t R = x.shape[0], C = x.shape[1];
  FMOE_REQUIRE(C % 32 == 0, "%s: x has %lld columns; MXFP4 needs a multiple of 32", op, (long long)C);
  auto packed = new_array<uint8_t>({size_t(R), size_t(C / 2)});
  auto scales = new_array<uint8_t>({size_t(R), size_t(C / 32)});
  {
    nb::gil_scoped_release nogil;
    fmt::quantize_mxfp4(static_cast<const float*>(x.data), R, C, packed.data(), scales.data());
  }
  return {packed, scales};
}

NpArray<float> py_dequantize_mxfp4(nb::handle p_in, nb::handle s_in) {
  const char* op = "dequantize_mxfp4";
  Keep keep;
  const TensorRef p = host_arg(op, "packed", p_in, DType::e2m1x2, keep, ByteAs::e2m1x2);
  require_ndim(op, "packed", p, 2, 2);
  const TensorRef s = host_arg(op, "scales", s_in, DType::ue8m0, keep, ByteAs::ue8m0);
  const int64_t R = p.shape[0], C = 2 * p.shape[1];
  FMOE_REQUIRE(C % 32 == 0, "%s: packed has %lld values per row; MXFP4 needs a multiple of 32", op,
               (long long)C);
  detail::check_shape(op, "scales", s, {R, C / 32});
  auto out = new_array<float>({size_t(R), size_t(C)});
  {
    nb::gil_scoped_release nogil;
    fmt::dequantize_mxfp4(static_cast<const uint8_t*>(p.data), static_cast<const uint8_t*>(s.data), R,
                          C, out.data());
  }
  return out;
}

/// Element-wise codec over any contiguous host array: In -> Out with the same shape.
template <class In, class Out, class F>
nb::object map_codes(const char* op, nb::handle h, DType want, ByteAs byte_as, F f) {
  Keep keep;
  const TensorRef t = host_arg(op, "x", h, want, keep, byte_as);
  const int64_t n = t.numel();
  auto flat = new_array<Out>({size_t(n)});
  const In* in = static_cast<const In*>(t.data);
  for (int64_t i = 0; i < n; ++i) flat.data()[i] = f(in[i]);
  nb::list shape;
  for (int d = 0; d < t.ndim; ++d) shape.append(t.shape[d]);
  return nb::cast(flat).attr("reshape")(nb::tuple(shape));
}

// ---- checkpoints ---------------------------------------------------------------------------------

#if FMOE_PY_HAS_CHECKPOINT
/// Layer `layer` of the checkpoint in `dir`, in host memory: (config, {name: (array, DType)}).
/// The arrays are numpy views of the loader's buffers (uint8 for 1-byte types, int16 for bf16,
/// float32, int32), kept alive by the arrays themselves.
std::pair<MoeConfig, nb::dict> py_load_moe_layer(const std::string& dir, int layer) {
  auto ck = std::make_shared<CheckpointLayer>();
  {
    nb::gil_scoped_release nogil;
    *ck = load_moe_layer(dir, layer);
  }
  auto* holder = new std::shared_ptr<CheckpointLayer>(ck);
  nb::capsule owner(holder, [](void* p) noexcept {
    delete static_cast<std::shared_ptr<CheckpointLayer>*>(p);
  });
  nb::dict out;
  auto add = [&](const char* name, HostTensor& t) {
    if (t.empty()) return;
    std::vector<size_t> shape(t.shape.begin(), t.shape.end());
    const size_t eb = dtype_bytes(t.dtype);
    nb::dlpack::dtype dt;
    if (t.dtype == DType::f32) dt = nb::dtype<float>();
    else if (t.dtype == DType::i32) dt = nb::dtype<int32_t>();
    else if (eb == 2) dt = nb::dtype<int16_t>();  // bf16 bits (torch.from_numpy takes int16)
    else dt = nb::dtype<uint8_t>();
    nb::ndarray<nb::numpy> a(t.bytes.data(), shape.size(), shape.data(), owner, nullptr, dt);
    out[name] = nb::make_tuple(a.cast(), t.dtype);
  };
  add("w13", ck->w13);
  add("w13_scale", ck->w13_scale);
  add("w2", ck->w2);
  add("w2_scale", ck->w2_scale);
  add("shared_w13", ck->shared_w13);
  add("shared_w13_scale", ck->shared_w13_scale);
  add("shared_w2", ck->shared_w2);
  add("shared_w2_scale", ck->shared_w2_scale);
  add("shared_gate", ck->shared_gate);
  add("b13", ck->b13);
  add("b2", ck->b2);
  add("w13_scale_2", ck->w13_scale_2);
  add("w2_scale_2", ck->w2_scale_2);
  add("w13_input_scale", ck->w13_input_scale);
  add("w2_input_scale", ck->w2_input_scale);
  add("shared_w13_scale_2", ck->shared_w13_scale_2);
  add("shared_w2_scale_2", ck->shared_w2_scale_2);
  add("shared_w13_input_scale", ck->shared_w13_input_scale);
  add("shared_w2_input_scale", ck->shared_w2_input_scale);
  add("routing_bias", ck->routing_bias);
  add("router_weight", ck->router_weight);
  return {ck->config, out};
}
#endif

}  // namespace

// ---- RoPE ----------------------------------------------------------------------------------------
// In place on q (and k); `style` by name ("neox" / "gptj"), checked here so the message names it.
static void py_rope(nb::handle q, nb::handle positions, nb::handle cos_sin_cache, int rope_dim,
                    nb::handle k, const std::string& style, bool inverse, nb::handle bad_position_count,
                    uintptr_t stream) {
  const char* op = "rope";
  FMOE_REQUIRE(style == "neox" || style == "gptj", "%s: style must be 'neox' or 'gptj', got '%s'", op,
               style.c_str());
  Keep keep;
  RopeArgs a;
  a.q = tensor_arg(Spec{op, "q", DType::bf16, ByteAs::none, Place::cuda, true}, q, keep);
  a.k = tensor_arg(Spec{op, "k", DType::bf16, ByteAs::none, Place::cuda, true}, k, keep);
  a.positions = tensor_arg(Spec{op, "positions", DType::i64}, positions, keep);
  a.cos_sin_cache = tensor_arg(Spec{op, "cos_sin_cache", DType::f32}, cos_sin_cache, keep);
  a.bad_position_count =
      tensor_arg(Spec{op, "bad_position_count", DType::i32, ByteAs::none, Place::cuda, true}, bad_position_count, keep);
  a.rope_dim = rope_dim;
  a.style = style == "gptj" ? RopeStyle::gptj : RopeStyle::neox;
  a.inverse = inverse;
#if defined(FMOE_HAS_CUDA)
  nb::gil_scoped_release nogil;
  rope(a, as_stream(stream));
#else
  (void)stream;
  no_cuda(op);
#endif
}

NB_MODULE(_fusedmoe, m) {
  m.doc() = "fusedmoe: fused Mixture-of-Experts layers for Hopper GPUs (the C++ library's binding)";
  nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  m.attr("built_with_cuda") = kBuiltWithCuda;
  m.attr("has_checkpoint_loader") = bool(FMOE_PY_HAS_CHECKPOINT);

  nb::enum_<DType>(m, "DType", "Storage element types (fusedmoe::DType)")
      .value("bf16", DType::bf16)
      .value("f16", DType::f16)
      .value("f32", DType::f32)
      .value("e4m3", DType::e4m3)
      .value("e2m1x2", DType::e2m1x2)
      .value("ue8m0", DType::ue8m0)
      .value("i32", DType::i32)
      .value("i64", DType::i64);
  nb::enum_<RoutingFn>(m, "RoutingFn")
      .value("softmax_topk", RoutingFn::softmax_topk)
      .value("sigmoid_grouped_topk", RoutingFn::sigmoid_grouped_topk)
      .value("sigmoid_top1_on_input", RoutingFn::sigmoid_top1_on_input)
      .value("topk_softmax", RoutingFn::topk_softmax);
  nb::enum_<ActivationFn>(m, "ActivationFn")
      .value("swiglu", ActivationFn::swiglu)
      .value("swiglu_clamped", ActivationFn::swiglu_clamped);
  nb::enum_<Precision>(m, "Precision")
      .value("bf16", Precision::bf16)
      .value("fp8_block", Precision::fp8_block)
      .value("nvfp4", Precision::nvfp4)
      .value("mxfp4", Precision::mxfp4);
  nb::enum_<ReductionMode>(m, "ReductionMode")
      .value("fast", ReductionMode::fast)
      .value("deterministic", ReductionMode::deterministic);

  nb::class_<RoutingConfig>(m, "RoutingConfig", "How router logits become (expert, weight) pairs")
      .def(nb::init<>())
      .def_rw("fn", &RoutingConfig::fn)
      .def_rw("renormalize", &RoutingConfig::renormalize)
      .def_rw("softcap", &RoutingConfig::softcap)
      .def_rw("num_groups", &RoutingConfig::num_groups)
      .def_rw("topk_groups", &RoutingConfig::topk_groups)
      .def_rw("correction_bias", &RoutingConfig::correction_bias)
      .def_rw("router_bias", &RoutingConfig::router_bias)
      .def_rw("routed_scaling_factor", &RoutingConfig::routed_scaling_factor);
  nb::class_<ActivationConfig>(m, "ActivationConfig")
      .def(nb::init<>())
      .def_rw("fn", &ActivationConfig::fn)
      .def_rw("alpha", &ActivationConfig::alpha)
      .def_rw("limit", &ActivationConfig::limit);

  nb::class_<MoeConfig>(m, "MoeConfig",
                        "One MoE layer: sizes, routing, activation, precisions (fusedmoe::MoeConfig)")
      .def(nb::init<>())
      .def_static("preset", [](const std::string& name) { return find_preset(name); }, "name"_a,
                  "A copy of the preset `name`; fusedmoe.Error lists the presets when unknown.")
      .def_static("presets", []() { return model_presets(); }, "Copies of every preset.")
      .def_static("default_preset_name", []() { return std::string(default_preset_name()); })
      .def_static(
          "from_json",
          [](const std::string& path, std::optional<std::string> precision) {
            if (!precision) return config_from_hf_json_file(path);
            const Precision p = parse_precision(*precision);
            return config_from_hf_json_file(path, &p);
          },
          "path"_a, "precision"_a = nb::none(),
          "The MoE fields of a Hugging Face config.json (precision overrides quantization_config: "
          "'bf16', 'fp8', 'fp8_block', 'nvfp4').")
      .def_static(
          "from_json_text",
          [](const std::string& text, const std::string& origin, std::optional<std::string> precision) {
            if (!precision) return config_from_hf_json_text(text, origin);
            const Precision p = parse_precision(*precision);
            return config_from_hf_json_text(text, origin, &p);
          },
          "text"_a, "origin"_a = "<text>", "precision"_a = nb::none())
      .def("validate", &MoeConfig::validate, "Raises fusedmoe.Error naming the first bad field.")
      .def("summary", &MoeConfig::summary)
      .def("copy", [](const MoeConfig& c) { return c; })
      .def("__repr__", [](const MoeConfig& c) { return "MoeConfig(" + c.summary() + ")"; })
      .def_rw("name", &MoeConfig::name)
      .def_rw("hidden", &MoeConfig::hidden)
      .def_rw("intermediate", &MoeConfig::intermediate)
      .def_rw("num_experts", &MoeConfig::num_experts)
      .def_rw("top_k", &MoeConfig::top_k)
      .def_rw("num_shared_experts", &MoeConfig::num_shared_experts)
      .def_rw("shared_intermediate", &MoeConfig::shared_intermediate)
      .def_rw("shared_expert_gate", &MoeConfig::shared_expert_gate)
      .def_rw("expert_bias", &MoeConfig::expert_bias)
      .def_rw("routing", &MoeConfig::routing)
      .def_rw("activation", &MoeConfig::activation)
      .def_rw("weight_precision", &MoeConfig::weight_precision)
      .def_rw("activation_precision", &MoeConfig::activation_precision);

  nb::class_<PyLayer>(m, "_Layer", "The library's MoeLayer; fusedmoe.MoeLayer wraps it for torch")
      .def(nb::init<const MoeConfig&, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle,
                    nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle,
                    nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, uintptr_t>(),
           "config"_a, "w13"_a.none(), "w13_scale"_a.none(), "w2"_a.none(), "w2_scale"_a.none(), "b13"_a.none(),
           "b2"_a.none(), "routing_bias"_a.none(), "shared_w13"_a.none(),
           "shared_w13_scale"_a.none(), "shared_w2"_a.none(), "shared_w2_scale"_a.none(),
           "shared_gate"_a.none(), "w13_scale_2"_a.none(), "w2_scale_2"_a.none(),
           "shared_w13_scale_2"_a.none(), "shared_w2_scale_2"_a.none(), "stream"_a)
      .def_prop_ro("config", &PyLayer::config)
      .def_prop_ro("device", &PyLayer::device)
      .def_prop_ro("prepared_bytes", &PyLayer::prepared_bytes)
      .def("workspace_size", &PyLayer::workspace_size, "max_tokens"_a, "mode"_a)
      .def("forward", &PyLayer::forward, "x"_a.none(), "router_logits"_a.none(), "y"_a.none(),
           "workspace"_a.none(), "stream"_a, "mode"_a, "topk_ids"_a.none(), "topk_weights"_a.none(),
           "validate_routing"_a, "x_fp8"_a.none(), "x_fp8_scales"_a.none())
      .def("dropped_routes", &PyLayer::dropped_routes, "workspace"_a.none(), "stream"_a)
      .def("host_ns_per_forward", &PyLayer::host_ns_per_forward, "x"_a, "router_logits"_a, "y"_a,
           "workspace"_a, "stream"_a, "mode"_a, "iters"_a);

  nb::class_<PyNvfp4GroupedGemm>(m, "_Nvfp4GroupedGemm",
                                 "The library's Nvfp4GroupedGemm; fusedmoe.Nvfp4GroupedGemm wraps it for torch")
      .def(nb::init<nb::handle, nb::handle, nb::handle, uintptr_t>(), "b"_a.none(),
           "b_scale"_a.none(), "b_global"_a.none(), "stream"_a)
      .def_prop_ro("device", &PyNvfp4GroupedGemm::device)
      .def_prop_ro("groups", &PyNvfp4GroupedGemm::groups)
      .def_prop_ro("n", &PyNvfp4GroupedGemm::n)
      .def_prop_ro("k", &PyNvfp4GroupedGemm::k)
      .def_prop_ro("prepared_bytes", &PyNvfp4GroupedGemm::prepared_bytes)
      .def("workspace_size", &PyNvfp4GroupedGemm::workspace_size, "max_rows"_a)
      .def("run", &PyNvfp4GroupedGemm::run, "a"_a.none(), "a_scale"_a.none(), "a_global"_a.none(),
           "offsets"_a.none(), "c"_a.none(), "workspace"_a.none(), "stream"_a, "validate_offsets"_a)
      .def("offsets_clamped", &PyNvfp4GroupedGemm::offsets_clamped, "workspace"_a.none(), "stream"_a);

  m.def("gemv_nvfp4", &py_gemv_nvfp4, "a"_a.none(), "a_scale"_a.none(), "a_global"_a.none(),
        "b"_a.none(), "c"_a.none(), "b_scale"_a.none(), "b_global"_a.none(), "pdl"_a, "stream"_a);
  m.def("moe_gemv_nvfp4", &py_moe_gemv_nvfp4, "w"_a.none(), "w_scale"_a.none(),
        "w_global"_a.none(), "x"_a.none(), "topk_ids"_a.none(), "topk_weights"_a.none(),
        "y"_a.none(), "bad_id_count"_a.none(), "pdl"_a, "stream"_a);

  m.def("quantize_fp8_block", &py_quantize_fp8_block, "w"_a.none(),
        "FP8 E4M3 weights, one f32 scale per 128x128 block: w [R, C] or [E, R, C] f32 -> "
        "(codes uint8, scale_inv f32 [.., ceil(R/128), ceil(C/128)]); w ~= e4m3(codes) * scale_inv.");
  m.def("dequantize_fp8_block", &py_dequantize_fp8_block, "q"_a.none(), "scale_inv"_a.none());
  m.def("quantize_fp8_per_token", &py_quantize_fp8_per_token, "x"_a.none(), "block"_a = 128,
        "Activations: one f32 scale per row per `block` columns -> (codes uint8, scales f32).");
  m.def("dequantize_fp8_per_token", &py_dequantize_fp8_per_token, "q"_a.none(), "scales"_a.none(),
        "Inverse of quantize_fp8_per_token with block=128.");
  m.def("quantize_nvfp4", &py_quantize_nvfp4, "x"_a.none(), "global_scale"_a = nb::none(),
        "NVFP4 (ModelOpt): x [R, C] f32 -> (packed uint8 [R, C/2], block_scales uint8 e4m3 "
        "[R, C/16], global_scale); the global scale is amax/(6*448) unless given.");
  m.def("quantize_mxfp4", &py_quantize_mxfp4, "x"_a.none(),
        "MXFP4 (OCP MX, gpt-oss): x [R, C] f32 -> (packed uint8 [R, C/2], scales uint8 ue8m0 "
        "[R, C/32]); each scale the power of two amax32/6 rounded up (nothing clips).");
  m.def("dequantize_mxfp4", &py_dequantize_mxfp4, "packed"_a.none(), "scales"_a.none(),
        "Inverse of quantize_mxfp4: e2m1 * 2^(scale - 127), f32 [R, C].");
  m.def("rmsnorm_quant", &py_rmsnorm_quant, "x"_a.none(), "weight"_a.none(), "eps"_a, "out_format"_a,
        "out"_a.none(), "out_scale"_a.none(), "residual"_a.none(), "global_scale"_a.none(),
        "inv_rms"_a.none(), "pdl"_a, "stream"_a,
        "Fused RMSNorm + quantize (fusedmoe::rmsnorm_quant) on given CUDA tensors; "
        "fusedmoe.rmsnorm_quant allocates the outputs.");
  m.def("dequantize_nvfp4", &py_dequantize_nvfp4, "packed"_a.none(), "block_scales"_a.none(),
        "global_scale"_a);
  m.def("e4m3_from_float", [](nb::handle x) {
    return map_codes<float, uint8_t>("e4m3_from_float", x, DType::f32, ByteAs::none,
                                     [](float v) { return fmt::e4m3_from_float(v); });
  }, "x"_a.none(), "FP8 E4M3 codes of f32 values (RNE, saturating at +-448, NaN -> 0x7F).");
  m.def("e4m3_to_float", [](nb::handle x) {
    return map_codes<uint8_t, float>("e4m3_to_float", x, DType::e4m3, ByteAs::e4m3,
                                     [](uint8_t v) { return fmt::e4m3_to_float(v); });
  }, "x"_a.none());
  m.def("bf16_from_float", [](nb::handle x) {
    return map_codes<float, uint16_t>("bf16_from_float", x, DType::f32, ByteAs::none,
                                      [](float v) { return fmt::bf16_from_float(v); });
  }, "x"_a.none(), "bfloat16 bits (uint16) of f32 values, RNE.");

  m.def("gpu_usable", [](int index) {
    std::string why;
    const bool ok = gpu_usable(index, &why);
    return std::make_pair(ok, why);
  }, "index"_a = 0, "(True, '') when CUDA device `index` is an sm_90 GPU these kernels run on, "
                   "else (False, the reason).");

#if FMOE_PY_HAS_CHECKPOINT
  m.def("load_moe_layer", &py_load_moe_layer, "dir"_a, "layer"_a);
#endif
  m.def("rope", &py_rope, "q"_a.none(), "positions"_a.none(), "cos_sin_cache"_a.none(), "rope_dim"_a,
        "k"_a.none(), "style"_a, "inverse"_a, "bad_position_count"_a.none(), "stream"_a,
        "RoPE in place (fusedmoe::rope): the last rope_dim values of each head of q [T, Hq, D] "
        "(and k [T, Hk, D]) rotated by cos_sin_cache [max_position, rope_dim] f32 at positions [T].");
}
