// Writes small safetensors files for the checkpoint tests (the format by hand, so the tests do
// not depend on the reader they test).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace fusedmoe::test::st {

struct T {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline size_t elem(const std::string& d) {
  if (d == "BF16" || d == "F16") return 2;
  if (d == "F32" || d == "I32") return 4;
  if (d == "I64" || d == "F64") return 8;
  return 1;
}

// A tensor of `shape` whose byte i is (seed + i) mod 251.
inline T make(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, int seed) {
  size_t n = elem(dtype);
  for (int64_t d : shape) n *= size_t(d);
  T t{name, dtype, shape, std::vector<uint8_t>(n)};
  for (size_t i = 0; i < n; ++i) t.bytes[i] = uint8_t((seed + i) % 251);
  return t;
}

inline std::string header_of(const std::vector<T>& ts, const std::string& metadata = "") {
  std::string h = "{";
  if (!metadata.empty()) h += "\"__metadata__\":" + metadata + ",";
  size_t at = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    h += "\"" + ts[i].name + "\":{\"dtype\":\"" + ts[i].dtype + "\",\"shape\":[";
    for (size_t d = 0; d < ts[i].shape.size(); ++d) {
      if (d) h += ",";
      h += std::to_string(ts[i].shape[d]);
    }
    h += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + ts[i].bytes.size()) + "]}";
    h += i + 1 < ts.size() ? "," : "";
    at += ts[i].bytes.size();
  }
  return h + "}";
}

inline std::string file_bytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xFF);
  out += header;
  out.append(reinterpret_cast<const char*>(data.data()), data.size());
  return out;
}

inline std::string file_of(const std::vector<T>& ts, const std::string& metadata = "") {
  std::vector<uint8_t> data;
  for (const T& t : ts) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  return file_bytes(header_of(ts, metadata), data);
}

inline std::string temp_dir(const std::string& tag) {
  const std::string d = testing::TempDir() + "fmoe_st_" + tag + "_" + std::to_string(getpid());
  std::string cmd = "rm -rf '" + d + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(mkdir(d.c_str(), 0700), 0);
  return d;
}

inline void write(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

}  // namespace fusedmoe::test::st
