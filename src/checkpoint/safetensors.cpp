#include "checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/json.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe::detail {

namespace {

struct DTypeInfo {
  const char* name;
  StDType type;
  size_t bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {"BOOL", StDType::boolean, 1}, {"U8", StDType::u8, 1},       {"I8", StDType::i8, 1},
    {"I16", StDType::i16, 2},      {"U16", StDType::u16, 2},     {"F16", StDType::f16, 2},
    {"BF16", StDType::bf16, 2},    {"I32", StDType::i32, 4},     {"U32", StDType::u32, 4},
    {"F32", StDType::f32, 4},      {"F64", StDType::f64, 8},     {"I64", StDType::i64, 8},
    {"U64", StDType::u64, 8},      {"F8_E4M3", StDType::f8_e4m3, 1},
    {"F8_E5M2", StDType::f8_e5m2, 1}, {"F8_E8M0", StDType::f8_e8m0, 1},
};

std::string q(std::string_view s) { return json::printable(s, 120); }

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  FMOE_REQUIRE(false, "safetensors file %s: %s", q(origin).c_str(), what.c_str());
  __builtin_unreachable();
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A non-negative JSON integer that fits in 64 bits, else an Error naming `what`.
uint64_t as_u64(const json::Value& v, const std::string& origin, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  bad(origin, what + " must be a non-negative integer, got " + q(v.dump()));
}

}  // namespace

std::string st_shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const char* st_dtype_name(StDType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.type == t) return d.name;
  return "?";
}

size_t st_dtype_bytes(StDType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.type == t) return d.bytes;
  return 0;
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked against the byte count when parsed
  return n;
}

std::string StTensor::describe() const { return st_shape_text(shape) + " " + st_dtype_name(dtype); }

StHeader parse_safetensors_header(const uint8_t* bytes, size_t size, const std::string& origin,
                                  const StLimits& limits) {
  if (size < 8)
    bad(origin, "is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  const uint64_t n = read_le64(bytes);
  if (n > limits.max_header_bytes)
    bad(origin, "the header length is " + std::to_string(n) + " bytes, above the limit of " +
                    std::to_string(limits.max_header_bytes));
  if (n > size - 8)
    bad(origin, "the header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(size) + " bytes): truncated or not a safetensors file");
  if (n == 0 || bytes[8] != '{')
    bad(origin, "the header must be a JSON object starting with '{' at byte 8");
  StHeader h;
  h.data_start = 8 + n;
  const uint64_t data_bytes = size - h.data_start;

  // The header may be padded with trailing spaces (the format allows it for alignment).
  std::string_view text(reinterpret_cast<const char*>(bytes + 8), size_t(n));
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  const json::Document doc = json::parse(text, origin + " (header)");
  const json::Value& root = doc.root();
  if (!root.is_object()) bad(origin, "the header must be a JSON object");

  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    const json::Value& v = it.value();
    if (doc.duplicated(root, key)) bad(origin, "the header names " + q(key) + " twice");
    if (key == "__metadata__") {
      if (!v.is_object()) bad(origin, "\"__metadata__\" must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          bad(origin, "\"__metadata__\" value of " + q(m.key()) + " must be a string, got " +
                          q(m.value().dump()));
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor " + q(key);
    if (!v.is_object()) bad(origin, where + " must be an object with dtype, shape, data_offsets");
    const auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
    if (dt == v.end() || sh == v.end() || off == v.end())
      bad(origin, where + " lacks " +
                      (dt == v.end() ? "\"dtype\"" : sh == v.end() ? "\"shape\"" : "\"data_offsets\""));
    StTensor t;
    t.name = key;
    if (!dt->is_string()) bad(origin, where + ": \"dtype\" must be a string, got " + q(dt->dump()));
    const std::string dname = dt->get<std::string>();
    const DTypeInfo* info = nullptr;
    for (const DTypeInfo& d : kDTypes)
      if (dname == d.name) info = &d;
    if (!info) bad(origin, where + ": unknown dtype " + q(dname));
    t.dtype = info->type;
    if (!sh->is_array()) bad(origin, where + ": \"shape\" must be an array, got " + q(sh->dump()));
    if (int(sh->size()) > limits.max_dims)
      bad(origin, where + ": " + std::to_string(sh->size()) + " dimensions, above the limit of " +
                      std::to_string(limits.max_dims));
    unsigned __int128 elems = 1;
    for (const json::Value& d : *sh) {
      const uint64_t e = as_u64(d, origin, where + ": each \"shape\" entry");
      if (e > uint64_t(INT64_MAX)) bad(origin, where + ": shape entry " + std::to_string(e) + " is too large");
      t.shape.push_back(int64_t(e));
      elems *= e;
      if (elems > (unsigned __int128)(UINT64_MAX)) elems = (unsigned __int128)(UINT64_MAX) + 1;  // saturate
    }
    if (!off->is_array() || off->size() != 2)
      bad(origin, where + ": \"data_offsets\" must be [begin, end], got " + q(off->dump()));
    t.begin = as_u64((*off)[0], origin, where + ": data_offsets begin");
    t.end = as_u64((*off)[1], origin, where + ": data_offsets end");
    if (t.begin > t.end)
      bad(origin, where + ": data_offsets [" + std::to_string(t.begin) + ", " +
                      std::to_string(t.end) + "] end before begin");
    if (t.end > data_bytes)
      bad(origin, where + ": data_offsets end " + std::to_string(t.end) +
                      " is past the data section (" + std::to_string(data_bytes) + " bytes)");
    const unsigned __int128 want = elems * info->bytes;
    if (want != t.end - t.begin)
      bad(origin, where + ": shape " + st_shape_text(t.shape) + " " + info->name + " needs " +
                      (want > (unsigned __int128)(UINT64_MAX) ? std::string("more than 2^64")
                                                             : std::to_string(uint64_t(want))) +
                      " bytes, its data_offsets hold " + std::to_string(t.end - t.begin));
    h.tensors.push_back(std::move(t));
  }

  // Sorted by offset (empty tensors first at a tie), the tensors must tile the data exactly.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const StTensor& a, const StTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const StTensor& t : h.tensors) {
    if (t.begin < at)
      bad(origin, "tensor " + q(t.name) + " (bytes " + std::to_string(t.begin) + ".." +
                      std::to_string(t.end) + ") overlaps the tensor before it (ending at " +
                      std::to_string(at) + ")");
    if (t.begin > at)
      bad(origin, "bytes " + std::to_string(at) + ".." + std::to_string(t.begin) +
                      " of the data belong to no tensor (a hole before " + q(t.name) + ")");
    at = t.end;
  }
  if (at != data_bytes)
    bad(origin, "the data section is " + std::to_string(data_bytes) + " bytes but its tensors end at " +
                    std::to_string(at) + " (trailing bytes belong to no tensor)");
  return h;
}

// ---- one file -------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FMOE_REQUIRE(fd >= 0, "cannot open safetensors file %s: %s", q(path).c_str(), std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    FMOE_REQUIRE(false, "safetensors file %s must be a regular file", q(path).c_str());
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      FMOE_REQUIRE(false, "cannot map safetensors file %s (%zu bytes): %s", q(path).c_str(), size_,
                   std::strerror(err));
    }
    base_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid
  try {
    static const uint8_t kEmpty[1] = {0};
    header_ = parse_safetensors_header(base_ ? base_ : kEmpty, size_, path);
  } catch (...) {
    if (base_) munmap(const_cast<uint8_t*>(base_), size_);
    base_ = nullptr;
    throw;
  }
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

// ---- a model ---------------------------------------------------------------------------------

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

}  // namespace

std::string read_small_file(const std::string& path, size_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FMOE_REQUIRE(fd >= 0, "cannot open %s: %s", q(path).c_str(), std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) > limit) {
    ::close(fd);
    FMOE_REQUIRE(false, "%s must be a regular file of at most %zu bytes", q(path).c_str(), limit);
  }
  std::string s(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < s.size()) {
    const ssize_t r = ::read(fd, s.data() + got, s.size() - got);
    if (r <= 0) {
      ::close(fd);
      FMOE_REQUIRE(false, "cannot read %s", q(path).c_str());
    }
    got += size_t(r);
  }
  ::close(fd);
  return s;
}

SafetensorsModel::SafetensorsModel(const std::string& path) : path_(path) {
  if (!is_dir(path)) {
    FMOE_REQUIRE(exists(path), "checkpoint %s does not exist", q(path).c_str());
    const size_t slash = path.find_last_of('/');
    dir_ = slash == std::string::npos ? "." : path.substr(0, slash);
    const std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
    shards_.emplace(file, std::make_unique<SafetensorsFile>(path));
    return;
  }
  dir_ = path;
  const std::string index = path + "/model.safetensors.index.json";
  if (!exists(index)) {
    const std::string single = path + "/model.safetensors";
    FMOE_REQUIRE(exists(single), "checkpoint directory %s has neither model.safetensors.index.json "
                 "nor model.safetensors", q(path).c_str());
    shards_.emplace("model.safetensors", std::make_unique<SafetensorsFile>(single));
    return;
  }
  const std::string text = read_small_file(index, 64ull << 20);
  const json::Document doc = json::parse(text, index);
  const json::Value& root = doc.root();
  FMOE_REQUIRE(root.is_object() && root.contains("weight_map") && root["weight_map"].is_object(),
               "%s: expected an object with a \"weight_map\" object (tensor name -> shard file)",
               q(index).c_str());
  const json::Value& wm = root["weight_map"];
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    FMOE_REQUIRE(!doc.duplicated(wm, it.key()), "%s: \"weight_map\" names tensor %s twice",
                 q(index).c_str(), q(it.key()).c_str());
    FMOE_REQUIRE(it.value().is_string(), "%s: the shard of tensor %s must be a file name, got %s",
                 q(index).c_str(), q(it.key()).c_str(), q(it.value().dump()).c_str());
    const std::string file = it.value().get<std::string>();
    // A shard is a file of this directory: no path, so an index cannot point elsewhere.
    FMOE_REQUIRE(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
                 "%s: the shard of tensor %s must be a file name in the same directory, got %s",
                 q(index).c_str(), q(it.key()).c_str(), q(file).c_str());
    weight_map_.emplace(it.key(), file);
  }
  FMOE_REQUIRE(!weight_map_.empty(), "%s: \"weight_map\" is empty", q(index).c_str());
}

SafetensorsModel::~SafetensorsModel() = default;

const SafetensorsFile& SafetensorsModel::shard(const std::string& file) const {
  auto it = shards_.find(file);
  if (it == shards_.end()) {
    const std::string p = dir_ + "/" + file;
    FMOE_REQUIRE(exists(p), "checkpoint %s: shard %s (listed by model.safetensors.index.json) is "
                 "missing", q(path_).c_str(), q(file).c_str());
    it = shards_.emplace(file, std::make_unique<SafetensorsFile>(p)).first;
  }
  return *it->second;
}

bool SafetensorsModel::has(std::string_view name) const {
  if (sharded()) return weight_map_.find(name) != weight_map_.end();
  return shards_.begin()->second->find(name) != nullptr;
}

StView SafetensorsModel::get(std::string_view name) const {
  const SafetensorsFile* f = nullptr;
  if (sharded()) {
    const auto it = weight_map_.find(name);
    FMOE_REQUIRE(it != weight_map_.end(), "checkpoint %s: tensor %s is missing (not in "
                 "model.safetensors.index.json)", q(path_).c_str(), q(name).c_str());
    f = &shard(it->second);
    FMOE_REQUIRE(f->find(name), "checkpoint %s: model.safetensors.index.json puts tensor %s in "
                 "shard %s, which has no such tensor", q(path_).c_str(), q(name).c_str(),
                 q(it->second).c_str());
  } else {
    f = shards_.begin()->second.get();
    FMOE_REQUIRE(f->find(name), "checkpoint %s: tensor %s is missing", q(path_).c_str(),
                 q(name).c_str());
  }
  const StTensor* t = f->find(name);
  return {t, f->data(*t), &f->path()};
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  if (sharded()) {
    for (const auto& [n, f] : weight_map_) out.push_back(n);
  } else {
    for (const StTensor& t : shards_.begin()->second->header().tensors) out.push_back(t.name);
    std::sort(out.begin(), out.end());
  }
  return out;
}

}  // namespace fusedmoe::detail
