// load_moe_layer (include/fusedmoe/checkpoint.hpp): which format a model directory holds, where
// the layer's tensors are, and how each lands in the MoeLayerWeights layouts.
//
// Order of work: the config (config.json, with hf_quant_config.json for ModelOpt exports that
// carry no quantization_config), the layer's prefix (found by its router tensor), the experts'
// layout (per expert or fused, by which tensor names exist), then every destination tensor is
// allocated and filled, tensor by tensor, each checked for dtype and shape before a byte is
// copied. Names are checked against real checkpoints' (README "Checkpoints").
#include "fusedmoe/checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>

#include "checkpoint/safetensors.hpp"
#include "common/json.hpp"
#include "common/parallel.hpp"
#include "common/text.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"

namespace fusedmoe {

const char* expert_layout_name(ExpertLayout l) {
  switch (l) {
    case ExpertLayout::per_expert: return "per-expert";
    case ExpertLayout::stacked: return "stacked (experts.gate_up_proj [E, 2I, H])";
    case ExpertLayout::gpt_oss: return "gpt-oss fused (experts.gate_up_proj [E, H, 2I] + biases)";
    case ExpertLayout::llama4: return "Llama-4 stacked (experts.gate_up_proj [E, H, 2I])";
  }
  return "?";
}

TensorRef HostTensor::ref() {
  TensorRef r;
  if (empty()) return r;
  r.data = bytes.data();
  r.dtype = dtype;
  r.ndim = int(shape.size());
  int64_t stride = 1;
  for (int d = r.ndim - 1; d >= 0; --d) {
    r.shape[d] = shape[d];
    r.stride[d] = stride;
    stride *= shape[d];
  }
  r.device = Device::cpu;
  return r;
}

uint64_t CheckpointLayer::host_bytes() const {
  uint64_t n = 0;
  for (const HostTensor* t :
       {&w13, &w13_scale, &w2, &w2_scale, &w13_scale_2, &w2_scale_2, &w13_input_scale,
        &w2_input_scale, &b13, &b2, &routing_bias, &router_weight, &shared_w13, &shared_w13_scale,
        &shared_w2, &shared_w2_scale, &shared_w13_scale_2, &shared_w2_scale_2,
        &shared_w13_input_scale, &shared_w2_input_scale, &shared_gate})
    n += t->bytes.size();
  return n;
}

MoeLayerWeights CheckpointLayer::host_weights() {
  MoeLayerWeights w;
  w.w13 = w13.ref();
  w.w13_scale = w13_scale.ref();
  w.w13_scale_2 = w13_scale_2.ref();
  w.w2 = w2.ref();
  w.w2_scale = w2_scale.ref();
  w.w2_scale_2 = w2_scale_2.ref();
  w.b13 = b13.ref();
  w.b2 = b2.ref();
  w.routing_bias = routing_bias.ref();
  w.shared_w13 = shared_w13.ref();
  w.shared_w13_scale = shared_w13_scale.ref();
  w.shared_w2 = shared_w2.ref();
  w.shared_w2_scale = shared_w2_scale.ref();
  w.shared_w13_scale_2 = shared_w13_scale_2.ref();
  w.shared_w2_scale_2 = shared_w2_scale_2.ref();
  w.shared_gate = shared_gate.ref();
  return w;
}

namespace {

using detail::StDType;
using detail::StView;

HostTensor make(DType t, std::vector<int64_t> shape) {
  HostTensor h;
  h.dtype = t;
  h.shape = std::move(shape);
  size_t n = dtype_bytes(t);
  for (int64_t d : h.shape) n *= size_t(d);
  h.bytes.resize(n);  // uninitialized: the loader writes every byte (HostBytes)
  return h;
}

int64_t cdiv128(int64_t x) { return (x + 127) / 128; }

bool file_exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

std::string shown(const std::string& s) { return json::printable(s); }

// ---- the config -------------------------------------------------------------------------------

// A string field of an object, or "" when absent or not a string.
std::string string_field(const json::Value& obj, const char* key) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// config.json's quant_method (the language model's, for multimodal wrappers), or "".
std::string quant_method(const json::Value& root) {
  if (!root.is_object()) return "";
  const auto text = root.find("text_config");
  if (text != root.end() && text->is_object()) {
    const auto q = text->find("quantization_config");
    if (q != text->end()) return string_field(*q, "quant_method");
  }
  const auto q = root.find("quantization_config");
  return q != root.end() ? string_field(*q, "quant_method") : std::string();
}

}  // namespace

MoeConfig checkpoint_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  FMOE_REQUIRE(file_exists(path), "checkpoint %s has no config.json", shown(dir).c_str());
  const std::string text =
      detail::read_small_file(path, size_t(ConfigLimits::kMaxConfigJsonBytes));
  const std::string method = [&] {
    const json::ScopedCLocale c_locale;
    json::Limits limits;
    limits.max_depth = 64;
    limits.max_values = 1 << 18;
    return quant_method(json::parse(text, path, limits).root());
  }();
  FMOE_REQUIRE(method.empty() || method == "fp8" || method == "modelopt" || method == "mxfp4",
               "checkpoint %s: config.json's quantization_config.quant_method %s is not a "
               "checkpoint format fusedmoe reads (\"fp8\" with 128x128 blocks, \"modelopt\" NVFP4, "
               "\"mxfp4\" as gpt-oss ships it, or none for BF16)", shown(dir).c_str(),
               detail::quote_user_text(method, 40).c_str());

  // ModelOpt exports describe their quantization in hf_quant_config.json (older ones only there).
  std::optional<Precision> override_precision;
  const std::string hq = dir + "/hf_quant_config.json";
  if (file_exists(hq)) {
    const json::Document doc = json::parse(detail::read_small_file(hq, 4u << 20), hq);
    const json::Value& root = doc.root();
    const json::Value* quant = nullptr;
    if (root.is_object() && root.contains("quantization")) quant = &root["quantization"];
    FMOE_REQUIRE(quant && quant->is_object(), "%s: expected an object with a \"quantization\" "
                 "object (ModelOpt's format)", shown(hq).c_str());
    const std::string algo = string_field(*quant, "quant_algo");
    FMOE_REQUIRE(algo == "NVFP4", "%s: field \"quantization.quant_algo\" = %s is not supported "
                 "(expected \"NVFP4\")", shown(hq).c_str(), detail::quote_user_text(algo, 40).c_str());
    if (quant->contains("group_size")) {
      const json::Value& g = (*quant)["group_size"];
      FMOE_REQUIRE(g.is_number_integer() && g.get<int64_t>() == 16,
                   "%s: field \"quantization.group_size\" must be 16 for NVFP4, got %s",
                   shown(hq).c_str(), json::printable(g.dump(), 40).c_str());
    }
    FMOE_REQUIRE(method != "fp8", "checkpoint %s: config.json says fp8 but hf_quant_config.json "
                 "says NVFP4", shown(dir).c_str());
    if (method.empty()) override_precision = Precision::nvfp4;
  }
  return config_from_hf_json_text(text, path, override_precision ? &*override_precision : nullptr);
}

namespace {

// ---- reading tensors --------------------------------------------------------------------------

// Where one [N, K] projection's tensors land (null: not read).
struct ProjDst {
  uint8_t* values = nullptr;
  uint8_t* scale = nullptr;      // fp8: weight_scale_inv f32 blocks; nvfp4: weight_scale e4m3
  float* scale_2 = nullptr;      // nvfp4: weight_scale_2
  float* input_scale = nullptr;  // nvfp4: input_scale
};

class Loader {
 public:
  Loader(const detail::SafetensorsModel& model, const std::string& dir, CheckpointLayer& L,
         void (*progress)(uint64_t, uint64_t, void*), void* arg)
      : model_(model), dir_(shown(dir)), L_(L), progress_(progress), arg_(arg) {}

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return model_.has(name); }

  void set_total(uint64_t total) { total_ = total; }
  void advance(uint64_t bytes) {
    done_ = std::min(total_, done_ + bytes);
    if (progress_) progress_(done_, total_, arg_);
  }
  void finish() {
    done_ = total_;
    if (progress_) progress_(done_, total_, arg_);
  }

  void require(const std::string& name) const {
    FMOE_REQUIRE(model_.has(name), "checkpoint %s: tensor %s is missing", dir_.c_str(),
                 shown(name).c_str());
  }

  // The tensor `name`: one of `dtypes`, of `shape` (an empty shape also accepts [1]: scalars are
  // stored either way).
  StView get(const std::string& name, std::initializer_list<StDType> dtypes,
             const std::vector<int64_t>& shape) const {
    require(name);
    const StView v = model_.get(name);
    const bool dtype_ok =
        std::find(dtypes.begin(), dtypes.end(), v.tensor->dtype) != dtypes.end();
    const bool shape_ok =
        v.tensor->shape == shape || (shape.empty() && v.tensor->shape == std::vector<int64_t>{1});
    if (!dtype_ok || !shape_ok) {
      std::string want;
      for (StDType d : dtypes) want += std::string(want.empty() ? "" : " or ") + detail::st_dtype_name(d);
      FMOE_REQUIRE(false, "checkpoint %s: tensor %s must be %s %s, it is %s (file %s)",
                   dir_.c_str(), shown(name).c_str(),
                   shape.empty() ? "a scalar ([] or [1])" : detail::st_shape_text(shape).c_str(),
                   want.c_str(), v.tensor->describe().c_str(), shown(*v.file).c_str());
    }
    L_.bytes_read += v.tensor->bytes();
    return v;
  }

  // Plans the copy of the tensor's bytes to dst (checked now, copied by run_copies()).
  void copy(const std::string& name, StDType want, const std::vector<int64_t>& shape, uint8_t* dst) {
    const StView v = get(name, {want}, shape);
    if (v.tensor->bytes()) copies_.push_back({dst, v.data, size_t(v.tensor->bytes())});
  }

  // The planned copies, in pieces of at most 4 MB spread over the host threads (one thread
  // copies from the page cache at a fraction of the memory bandwidth: the page faults on both
  // sides cost more than the bytes), in batches of about 256 MB with the progress between them.
  void run_copies() {
    constexpr size_t kPiece = 4u << 20, kBatch = 256u << 20;
    struct Piece {
      uint8_t* dst;
      const uint8_t* src;
      size_t n;
    };
    std::vector<Piece> pieces;
    size_t batch_bytes = 0;
    auto flush = [&] {
      detail::parallel_for(int64_t(pieces.size()), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) std::memcpy(pieces[size_t(i)].dst, pieces[size_t(i)].src, pieces[size_t(i)].n);
      });
      advance(batch_bytes);
      pieces.clear();
      batch_bytes = 0;
    };
    for (const Copy& c : copies_) {
      for (size_t at = 0; at < c.n; at += kPiece) {
        const size_t n = std::min(kPiece, c.n - at);
        pieces.push_back({c.dst + at, c.src + at, n});
        batch_bytes += n;
        if (batch_bytes >= kBatch) flush();
      }
    }
    if (!pieces.empty()) flush();
    copies_.clear();
  }

  // A bf16 or f32 vector or scalar as f32 values at dst.
  void copy_as_f32(const std::string& name, const std::vector<int64_t>& shape, float* dst) {
    const StView v = get(name, {StDType::f32, StDType::bf16}, shape);
    const int64_t n = v.tensor->numel();
    if (v.tensor->dtype == StDType::f32) {
      std::memcpy(dst, v.data, size_t(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, v.data + 2 * i, 2);
        dst[i] = fmt::bf16_to_float(bits);
      }
    }
    advance(v.tensor->bytes());
  }

  // One projection P.{weight,...} of [N, K] in `p`'s format.
  void projection(const std::string& p, Precision prec, int64_t N, int64_t K, const ProjDst& d) {
    switch (prec) {
      case Precision::bf16:
        copy(p + ".weight", StDType::bf16, {N, K}, d.values);
        return;
      case Precision::fp8_block:
        copy(p + ".weight", StDType::f8_e4m3, {N, K}, d.values);
        copy(p + ".weight_scale_inv", StDType::f32, {cdiv128(N), cdiv128(K)}, d.scale);
        return;
      case Precision::nvfp4:
        copy(p + ".weight", StDType::u8, {N, K / 2}, d.values);
        copy(p + ".weight_scale", StDType::f8_e4m3, {N, K / 16}, d.scale);
        copy(p + ".weight_scale_2", StDType::f32, {}, reinterpret_cast<uint8_t*>(d.scale_2));
        copy(p + ".input_scale", StDType::f32, {}, reinterpret_cast<uint8_t*>(d.input_scale));
        return;
      case Precision::mxfp4:  // find_layout sends MXFP4 to gpt-oss's fused layout only
        FMOE_REQUIRE(false, "checkpoint %s: %s: per-expert MXFP4 projections are not a layout "
                     "fusedmoe reads (gpt-oss's experts.*_blocks / _scales are)", dir_.c_str(),
                     shown(p).c_str());
    }
  }

  // A stacked bf16 tensor [E, R, C] into dst as [E, C, R] (transpose = true) or as it is.
  void stacked(const std::string& name, int64_t E, int64_t R, int64_t C, bool transpose, uint8_t* dst) {
    const StView v = get(name, {StDType::bf16}, {E, R, C});
    const size_t per = size_t(R * C) * 2;
    for (int64_t e = 0; e < E; ++e) {
      const uint8_t* src = v.data + size_t(e) * per;
      uint8_t* out = dst + size_t(e) * per;
      if (!transpose) {
        std::memcpy(out, src, per);
      } else {
        // 32x32 tiles of 2-byte elements, rows of tiles split over the host threads.
        constexpr int64_t kTile = 32;
        detail::parallel_for((R + kTile - 1) / kTile, [&](int64_t b, int64_t end) {
          for (int64_t rt = b * kTile; rt < std::min(R, end * kTile); rt += kTile)
            for (int64_t ct = 0; ct < C; ct += kTile)
              for (int64_t r = rt; r < std::min(R, rt + kTile); ++r)
                for (int64_t c = ct; c < std::min(C, ct + kTile); ++c)
                  std::memcpy(out + size_t(c * R + r) * 2, src + size_t(r * C + c) * 2, 2);
        }, 4);
      }
      advance(per);
    }
  }

 private:
  const detail::SafetensorsModel& model_;
  std::string dir_;
  CheckpointLayer& L_;
  void (*progress_)(uint64_t, uint64_t, void*);
  void* arg_;
  uint64_t done_ = 0, total_ = 0;
  struct Copy {
    uint8_t* dst;
    const uint8_t* src;
    size_t n;
  };
  std::vector<Copy> copies_;  // planned by copy(), done by run_copies()
};

// ---- where the layer is -----------------------------------------------------------------------

struct Family {
  const char* block;    // the MoE block under the layer: "mlp.", "feed_forward.", ...
  const char* router;   // the router under the block: "gate.weight", "router.weight"
  const char* gate;     // per-expert projection names
  const char* up;
  const char* down;
};

Family family_of(const MoeConfig& c) {
  if (c.name == "llama4_text") return {"feed_forward.", "router.weight", "gate_proj", "up_proj", "down_proj"};
  if (c.name == "gpt_oss") return {"mlp.", "router.weight", "gate_proj", "up_proj", "down_proj"};
  if (c.name == "mixtral") return {"block_sparse_moe.", "gate.weight", "w1", "w3", "w2"};
  return {"mlp.", "gate.weight", "gate_proj", "up_proj", "down_proj"};
}

// Where transformer layers live: plain causal LMs, Qwen3.5's multimodal wrapper (Transformers 5
// names), Llama 4's multimodal checkpoints.
constexpr const char* kLayerRoots[] = {"model.layers.", "model.language_model.layers.",
                                       "language_model.model.layers."};

// Layers the checkpoint has under `root` (one past the largest index), for messages.
int layer_count(const detail::SafetensorsModel& model, const std::string& root) {
  int n = 0;
  for (const std::string& name : model.names()) {
    if (name.compare(0, root.size(), root) != 0) continue;
    const int i = std::atoi(name.c_str() + root.size());
    n = std::max(n, i + 1);
  }
  return n;
}

std::string find_prefix(const detail::SafetensorsModel& model, const std::string& dir,
                        const Family& f, int layer) {
  std::string tried;
  for (const char* root : kLayerRoots) {
    const std::string p = root + std::to_string(layer) + "." + f.block;
    if (model.has(p + f.router)) return p;
    tried += std::string(tried.empty() ? "" : ", ") + p + f.router;
  }
  std::string layers;
  for (const char* root : kLayerRoots)
    if (const int n = layer_count(model, root); n > 0)
      layers = strf(" (the checkpoint has layers 0..%d under %s)", n - 1, root);
  FMOE_REQUIRE(false, "checkpoint %s: layer %d has no MoE router: none of %s exists; a dense "
               "layer, or an index past the last layer%s", shown(dir).c_str(), layer,
               shown(tried).c_str(), layers.c_str());
  __builtin_unreachable();
}

ExpertLayout find_layout(const Loader& rd, const MoeConfig& c, const Family& f, const std::string& p) {
  const std::string fused = p + "experts.gate_up_proj";
  const std::string first = p + "experts.0." + f.gate + ".weight";
  if (c.weight_precision == Precision::mxfp4 || rd.has(fused + "_blocks")) {
    // gpt-oss's MXFP4 experts: gate_up_proj_blocks / _scales, down_proj_blocks / _scales.
    FMOE_REQUIRE(c.weight_precision == Precision::mxfp4,
                 "checkpoint %s: %s_blocks holds MXFP4 experts but config.json's quantization_config "
                 "says %s (expected quant_method \"mxfp4\")", rd.dir().c_str(), shown(fused).c_str(),
                 precision_name(c.weight_precision));
    FMOE_REQUIRE(c.name == "gpt_oss", "checkpoint %s: MXFP4 experts are read in gpt-oss's layout "
                 "(model_type \"gpt_oss\"); this model is %s", rd.dir().c_str(),
                 detail::quote_user_text(c.name, 40).c_str());
    rd.require(fused + "_blocks");
    return ExpertLayout::gpt_oss;
  }
  if (c.name == "gpt_oss") {
    rd.require(fused);
    return ExpertLayout::gpt_oss;
  }
  if (rd.has(first)) return ExpertLayout::per_expert;
  if (rd.has(fused)) return c.name == "llama4_text" ? ExpertLayout::llama4 : ExpertLayout::stacked;
  FMOE_REQUIRE(false, "checkpoint %s: tensor %s is missing (nor are the experts stored fused as "
               "%s)", rd.dir().c_str(), shown(first).c_str(), shown(fused).c_str());
  __builtin_unreachable();
}

std::string format_line(Precision p, ExpertLayout l) {
  const char* tensors = p == Precision::fp8_block ? " (weight + weight_scale_inv 128x128)"
                        : p == Precision::nvfp4   ? " (ModelOpt: weight + weight_scale + weight_scale_2 + input_scale)"
                        : p == Precision::mxfp4   ? " (MXFP4: *_blocks + *_scales, UE8M0 per 32)"
                                                  : "";
  return strf("%s %s%s", precision_name(p), expert_layout_name(l), tensors);
}

// ---- one MLP's destination tensors --------------------------------------------------------

// An MLP of `experts` experts with intermediate `inter` (routed: E x I; shared: 1 x S) in
// precision `prec`: its tensors in the MoeLayerWeights layouts and where each projection lands.
struct MlpTensors {
  Precision prec;
  int64_t experts, inter, H;
  HostTensor *w13, *w13_scale, *w2, *w2_scale, *w13_s2, *w2_s2, *w13_in, *w2_in;

  static std::vector<int64_t> lead(int64_t experts, std::vector<int64_t> s, bool shared) {
    if (!shared) s.insert(s.begin(), experts);
    return s;
  }
  void allocate(bool shared) const {
    const int64_t I = inter;
    const DType vt = prec == Precision::bf16 ? DType::bf16
                     : prec == Precision::fp8_block ? DType::e4m3 : DType::e2m1x2;
    const bool fp4 = prec == Precision::nvfp4 || prec == Precision::mxfp4;
    const int64_t hk = fp4 ? H / 2 : H, ik = fp4 ? I / 2 : I;
    *w13 = make(vt, lead(experts, {2 * I, hk}, shared));
    *w2 = make(vt, lead(experts, {H, ik}, shared));
    if (prec == Precision::fp8_block) {
      *w13_scale = make(DType::f32, lead(experts, {2 * cdiv128(I), cdiv128(H)}, shared));
      *w2_scale = make(DType::f32, lead(experts, {cdiv128(H), cdiv128(I)}, shared));
    } else if (prec == Precision::nvfp4) {
      *w13_scale = make(DType::e4m3, lead(experts, {2 * I, H / 16}, shared));
      *w2_scale = make(DType::e4m3, lead(experts, {H, I / 16}, shared));
      *w13_s2 = make(DType::f32, lead(experts, {2}, shared));
      *w2_s2 = make(DType::f32, lead(experts, {1}, shared));
      *w13_in = make(DType::f32, lead(experts, {2}, shared));
      *w2_in = make(DType::f32, lead(experts, {1}, shared));
      if (!shared) {  // [E, 1] -> [E]
        w2_s2->shape = {experts};
        w2_in->shape = {experts};
      }
    } else if (prec == Precision::mxfp4) {
      *w13_scale = make(DType::ue8m0, lead(experts, {2 * I, H / 32}, shared));
      *w2_scale = make(DType::ue8m0, lead(experts, {H, I / 32}, shared));
    }
  }
  // Expert j's gate (half 0) or up (half 1) projection [I, H], or its down projection [H, I].
  ProjDst up_or_gate(int64_t j, int half) const {
    ProjDst d;
    const size_t per_expert = w13->bytes.size() / size_t(experts);
    d.values = w13->bytes.data() + size_t(j) * per_expert + half * per_expert / 2;
    if (!w13_scale->empty()) {
      const size_t s = w13_scale->bytes.size() / size_t(experts);
      d.scale = w13_scale->bytes.data() + size_t(j) * s + half * s / 2;
    }
    if (!w13_s2->empty()) {
      d.scale_2 = reinterpret_cast<float*>(w13_s2->bytes.data()) + 2 * j + half;
      d.input_scale = reinterpret_cast<float*>(w13_in->bytes.data()) + 2 * j + half;
    }
    return d;
  }
  ProjDst down(int64_t j) const {
    ProjDst d;
    d.values = w2->bytes.data() + size_t(j) * (w2->bytes.size() / size_t(experts));
    if (!w2_scale->empty())
      d.scale = w2_scale->bytes.data() + size_t(j) * (w2_scale->bytes.size() / size_t(experts));
    if (!w2_s2->empty()) {
      d.scale_2 = reinterpret_cast<float*>(w2_s2->bytes.data()) + j;
      d.input_scale = reinterpret_cast<float*>(w2_in->bytes.data()) + j;
    }
    return d;
  }
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const HostTensor* t : {w13, w13_scale, w2, w2_scale, w13_s2, w2_s2, w13_in, w2_in})
      n += t->bytes.size();
    return n;
  }
  // Reads the projections named `base` + {gate, up, down} of expert j (per-expert layouts).
  void read(Loader& rd, const std::string& base, const Family& f, int64_t j) const {
    rd.projection(base + f.gate, prec, inter, H, up_or_gate(j, 0));
    rd.projection(base + f.up, prec, inter, H, up_or_gate(j, 1));
    rd.projection(base + f.down, prec, H, inter, down(j));
  }
};

}  // namespace

CheckpointLayer load_moe_layer(const std::string& dir, int layer,
                               void (*progress)(uint64_t, uint64_t, void*), void* progress_arg) {
  FMOE_REQUIRE(layer >= 0, "load_moe_layer: layer must be >= 0, got %d", layer);
  CheckpointLayer L;
  L.layer = layer;
  L.config = checkpoint_config(dir);
  const MoeConfig& c = L.config;
  const Precision prec = c.weight_precision;
  const int64_t E = c.num_experts, H = c.hidden, I = c.intermediate, S = c.shared_intermediate;

  const detail::SafetensorsModel model(dir);
  Loader rd(model, dir, L, progress, progress_arg);
  const Family fam = family_of(c);
  L.prefix = find_prefix(model, dir, fam, layer);
  const std::string& p = L.prefix;
  L.layout = find_layout(rd, c, fam, p);
  L.format = format_line(prec, L.layout);
  FMOE_REQUIRE(L.layout == ExpertLayout::per_expert || prec == Precision::bf16 ||
                   (L.layout == ExpertLayout::gpt_oss && prec == Precision::mxfp4),
               "checkpoint %s: layer %d stores its experts fused (%sexperts.gate_up_proj) with %s "
               "weights; fused layouts are read in BF16 (and gpt-oss's in MXFP4) only",
               rd.dir().c_str(), layer, shown(p).c_str(), precision_name(prec));
  FMOE_REQUIRE(prec != Precision::fp8_block || I % 128 == 0,
               "checkpoint %s: FP8 block scales of the gate and up projections stack only when "
               "the expert intermediate size is a multiple of 128, it is %lld", rd.dir().c_str(),
               (long long)I);
  FMOE_REQUIRE(prec != Precision::fp8_block || c.num_shared_experts == 0 || S % 128 == 0,
               "checkpoint %s: the shared expert's intermediate size must be a multiple of 128 "
               "for FP8 block scales, it is %lld", rd.dir().c_str(), (long long)S);

  // Every destination first: the progress total is their size.
  const MlpTensors routed{prec, E, I, H, &L.w13, &L.w13_scale, &L.w2, &L.w2_scale,
                          &L.w13_scale_2, &L.w2_scale_2, &L.w13_input_scale, &L.w2_input_scale};
  routed.allocate(false);
  const MlpTensors shared{prec, 1, S, H, &L.shared_w13, &L.shared_w13_scale, &L.shared_w2,
                          &L.shared_w2_scale, &L.shared_w13_scale_2, &L.shared_w2_scale_2,
                          &L.shared_w13_input_scale, &L.shared_w2_input_scale};
  if (c.num_shared_experts > 0) shared.allocate(true);
  if (c.expert_bias) {
    L.b13 = make(DType::bf16, {E, 2 * I});
    L.b2 = make(DType::bf16, {E, H});
  }
  const std::string router = p + fam.router;
  L.router_key = router;
  rd.require(router);
  const bool router_f32 = model.get(router).tensor->dtype == StDType::f32;
  L.router_weight = make(router_f32 ? DType::f32 : DType::bf16, {E, H});
  if (c.routing.correction_bias || c.routing.router_bias) L.routing_bias = make(DType::f32, {E});
  if (c.shared_expert_gate) L.shared_gate = make(DType::bf16, {1, H});
  rd.set_total(L.host_bytes());

  // The experts.
  const std::string ex = p + "experts.";
  switch (L.layout) {
    case ExpertLayout::per_expert:
      for (int64_t j = 0; j < E; ++j) routed.read(rd, ex + std::to_string(j) + ".", fam, j);
      break;
    case ExpertLayout::stacked:
      rd.stacked(ex + "gate_up_proj", E, 2 * I, H, false, L.w13.bytes.data());
      rd.stacked(ex + "down_proj", E, H, I, false, L.w2.bytes.data());
      break;
    case ExpertLayout::gpt_oss:
      if (prec == Precision::mxfp4) {
        // Already [out, in] per expert: blocks [E, 2I, H/32, 16] are the codes [E, 2I, H/2]
        // (even element in the low nibble), rows gate 2i / up 2i + 1 as the clamped SwiGLU
        // takes them; scales [E, 2I, H/32] UE8M0. Copied as they are.
        rd.copy(ex + "gate_up_proj_blocks", StDType::u8, {E, 2 * I, H / 32, 16}, L.w13.bytes.data());
        rd.copy(ex + "gate_up_proj_scales", StDType::u8, {E, 2 * I, H / 32}, L.w13_scale.bytes.data());
        rd.copy(ex + "down_proj_blocks", StDType::u8, {E, H, I / 32, 16}, L.w2.bytes.data());
        rd.copy(ex + "down_proj_scales", StDType::u8, {E, H, I / 32}, L.w2_scale.bytes.data());
        break;
      }
      [[fallthrough]];
    case ExpertLayout::llama4:
      // [E, H, 2I] -> [E, 2I, H]: column n becomes row n, so gpt-oss's interleaved gate/up
      // columns become interleaved rows (its clamped SwiGLU's layout) and Llama 4's gate
      // columns then up columns become gate rows then up rows.
      rd.stacked(ex + "gate_up_proj", E, H, 2 * I, true, L.w13.bytes.data());
      rd.stacked(ex + "down_proj", E, I, H, true, L.w2.bytes.data());
      break;
  }
  if (c.expert_bias) {  // gpt-oss (bf16 in its checkpoints; f32 is read too)
    const StView b13 = rd.get(ex + "gate_up_proj_bias", {StDType::bf16, StDType::f32}, {E, 2 * I});
    const StView b2 = rd.get(ex + "down_proj_bias", {StDType::bf16, StDType::f32}, {E, H});
    for (auto [v, dst] : {std::pair{b13, &L.b13}, std::pair{b2, &L.b2}}) {
      if (v.tensor->dtype == StDType::f32) {
        dst->dtype = DType::f32;
        dst->bytes.assign(v.data, v.data + v.tensor->bytes());
      } else {
        std::memcpy(dst->bytes.data(), v.data, v.tensor->bytes());
      }
      rd.advance(v.tensor->bytes());
    }
  }

  // The router (its logits are the layer's input: kept for callers that compute them) and the
  // routing bias: DeepSeek's correction bias, or gpt-oss's router bias.
  rd.copy(router, router_f32 ? StDType::f32 : StDType::bf16, {E, H}, L.router_weight.bytes.data());
  float* bias = reinterpret_cast<float*>(L.routing_bias.bytes.data());
  if (c.routing.correction_bias) rd.copy_as_f32(p + "gate.e_score_correction_bias", {E}, bias);
  if (c.routing.router_bias) rd.copy_as_f32(p + "router.bias", {E}, bias);

  // Shared experts: DeepSeek's shared_experts.*, Qwen's and Llama 4's shared_expert.*.
  if (c.num_shared_experts > 0) {
    const std::string sp = p + (model.has(p + "shared_experts." + fam.gate + ".weight")
                                    ? "shared_experts."
                                    : "shared_expert.");
    shared.read(rd, sp, fam, 0);
    if (c.shared_expert_gate)
      rd.copy(p + "shared_expert_gate.weight", StDType::bf16, {1, H}, L.shared_gate.bytes.data());
  }
  rd.run_copies();
  rd.finish();
  return L;
}

}  // namespace fusedmoe
