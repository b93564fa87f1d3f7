// safetensors files (Hugging Face's checkpoint format), read-only and memory-mapped.
//
// A file is: an 8-byte little-endian header length N, N bytes of JSON (an object; it may be padded
// with trailing spaces), then the data. Each header key names a tensor with "dtype", "shape" and
// "data_offsets" [begin, end) relative to the data; "__metadata__" maps strings to strings. The
// reader holds the format's rules strictly (they are what the reference implementation checks):
// begin <= end <= data size, end - begin = product(shape) x element size, the tensors sorted by
// offset tile the data with no hole or overlap, names are unique. Anything else is an Error that
// names the file, the tensor and expected vs actual.
//
// A model directory holds one `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ("weight_map": tensor name -> shard file in the same directory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fusedmoe::detail {

/// Element types of safetensors headers. `u8` also carries packed FP4 (two E2M1 per byte) and
/// UE8M0 scales, as checkpoints store them.
enum class StDType : uint8_t { boolean, u8, i8, i16, u16, f16, bf16, i32, u32, f32, f64, i64, u64, f8_e4m3, f8_e5m2, f8_e8m0 };

const char* st_dtype_name(StDType t);  ///< as spelled in headers: "BF16", "F8_E4M3", ...
std::string st_shape_text(const std::vector<int64_t>& shape);  ///< "[256, 7168]"
size_t st_dtype_bytes(StDType t);

struct StTensor {
  std::string name;
  StDType dtype = StDType::u8;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  ///< byte offsets relative to the data section

  uint64_t bytes() const { return end - begin; }
  int64_t numel() const;
  std::string describe() const;  ///< "[256, 7168] F8_E4M3"
};

/// A validated header: tensors sorted by offset, metadata, where the data starts.
struct StHeader {
  std::vector<StTensor> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  ///< 8 + the header length
};

/// Bounds on a header (the reference implementation refuses headers above 100 MB).
struct StLimits {
  uint64_t max_header_bytes = 100ull << 20;
  int max_dims = 8;
};

/// Parses and validates the header of a whole file held in `bytes` (`size` bytes: the header and
/// all the data, which is not read). `origin` names the file in messages.
StHeader parse_safetensors_header(const uint8_t* bytes, size_t size, const std::string& origin,
                                  const StLimits& limits = {});

/// The whole of a small regular file (an index, config.json, hf_quant_config.json) of at most
/// `limit` bytes. Throws Error naming the path when it cannot be opened, is not a regular file,
/// or is larger.
std::string read_small_file(const std::string& path, size_t limit);

/// One safetensors file, memory-mapped read-only for the object's lifetime.
class SafetensorsFile {
 public:
  /// Opens, maps and validates `path` (a regular file). Throws Error naming it.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const StHeader& header() const { return header_; }
  size_t file_bytes() const { return size_; }
  /// The tensor named `name`, or nullptr.
  const StTensor* find(std::string_view name) const;
  /// The first byte of `t`'s data (t from this file's header).
  const uint8_t* data(const StTensor& t) const { return base_ + header_.data_start + t.begin; }

 private:
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  StHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in header_.tensors
};

/// A tensor of a model: its header entry, its bytes and the file that holds them.
struct StView {
  const StTensor* tensor = nullptr;
  const uint8_t* data = nullptr;
  const std::string* file = nullptr;
};

/// A model directory (or one .safetensors file): one file or an index and its shards. Shards
/// are opened on first use; the index's claim that a shard holds a tensor is checked then.
class SafetensorsModel {
 public:
  /// `path`: a directory with model.safetensors.index.json or model.safetensors, or a
  /// .safetensors file. Throws Error naming what is missing or malformed.
  explicit SafetensorsModel(const std::string& path);
  ~SafetensorsModel();

  const std::string& path() const { return path_; }
  bool sharded() const { return !weight_map_.empty(); }
  bool has(std::string_view name) const;
  /// The tensor `name`; a missing one is an Error naming the key and the model.
  StView get(std::string_view name) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;

 private:
  const SafetensorsFile& shard(const std::string& file) const;

  std::string path_, dir_;
  std::map<std::string, std::string, std::less<>> weight_map_;  // sharded: name -> shard file
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> shards_;
};

}  // namespace fusedmoe::detail
