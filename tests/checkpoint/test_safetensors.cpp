// The safetensors reader (src/checkpoint/safetensors.*): files the test writes itself, read back
// byte for byte; every malformed case gives an Error naming the file and the tensor.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/safetensors.hpp"
#include "fusedmoe/error.hpp"
#include "tests/checkpoint/safetensors_writer.hpp"
#include "tests/test_util.hpp"

namespace fusedmoe {
namespace {

using detail::SafetensorsFile;
using detail::SafetensorsModel;
using detail::StDType;
using test::expect_error;

using namespace test::st;

detail::StHeader parse(const std::string& bytes) {
  return detail::parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()),
                                          bytes.size(), "x.safetensors");
}

TEST(Safetensors, ReadsBackWhatWasWritten) {
  const std::vector<T> ts = {make("b.weight", "F8_E4M3", {3, 5}, 1), make("a.scale", "F32", {2}, 2),
                             make("c", "BF16", {2, 2, 2}, 3), make("empty", "I32", {0, 4}, 4),
                             make("scalar", "I64", {}, 5)};
  const std::string dir = temp_dir("rw");
  const std::string path = dir + "/model.safetensors";
  write(path, file_of(ts, "{\"format\":\"pt\"}"));
  SafetensorsFile f(path);
  EXPECT_EQ(f.header().metadata.at("format"), "pt");
  ASSERT_EQ(f.header().tensors.size(), ts.size());
  for (const T& t : ts) {
    const detail::StTensor* s = f.find(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_STREQ(detail::st_dtype_name(s->dtype), t.dtype.c_str());
    EXPECT_EQ(s->shape, t.shape);
    ASSERT_EQ(s->bytes(), t.bytes.size());
    if (!t.bytes.empty()) {
      EXPECT_EQ(std::memcmp(f.data(*s), t.bytes.data(), t.bytes.size()), 0) << t.name;
    }
  }
  EXPECT_EQ(f.find("missing"), nullptr);
  // The directory and the file path both open as a model.
  for (const std::string& p : {dir, path}) {
    SafetensorsModel m(p);
    EXPECT_FALSE(m.sharded());
    EXPECT_EQ(m.names(), (std::vector<std::string>{"a.scale", "b.weight", "c", "empty", "scalar"}));
    const detail::StView v = m.get("c");
    EXPECT_EQ(v.tensor->describe(), "[2, 2, 2] BF16");
    EXPECT_EQ(std::memcmp(v.data, ts[2].bytes.data(), 8), 0);
    expect_error([&] { m.get("model.layers.3.mlp.gate.weight"); },
                 "tensor model.layers.3.mlp.gate.weight is missing");
  }
}

TEST(Safetensors, HeaderMayBePaddedWithSpaces) {
  const std::vector<T> ts = {make("w", "U8", {7}, 9)};
  const std::string h = header_of(ts) + "      ";
  const detail::StHeader got = parse(file_bytes(h, ts[0].bytes));
  EXPECT_EQ(got.data_start, 8 + h.size());
  EXPECT_EQ(got.tensors.at(0).bytes(), 7u);
}

TEST(Safetensors, MalformedFilesNameTheFileAndTheTensor) {
  const std::vector<T> ts = {make("w", "F32", {2, 3}, 1), make("s", "F32", {2}, 2)};
  const std::string good = file_of(ts);
  std::vector<uint8_t> data;
  for (const T& t : ts) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  ASSERT_NO_THROW(parse(good));

  expect_error([] { parse("abc"); }, "x.safetensors: is 3 bytes, shorter than the 8-byte header");
  expect_error([&] { parse(good.substr(0, 20)); }, "runs past the end of the file (20 bytes)");
  std::string huge = good;
  huge[7] = 1;  // a header length of 2^56
  expect_error([&] { parse(huge); }, "above the limit of 104857600");
  expect_error([&] { parse(good.substr(0, good.size() - 4)); },
               "tensor s: data_offsets end 32 is past the data section (28 bytes)");
  expect_error([&] { parse(good + "xyz"); }, "the data section is 35 bytes but its tensors end at 32");
  expect_error([&] { parse(file_bytes("[1,2]", {})); }, "must be a JSON object starting with '{'");
  expect_error([&] { parse(file_bytes("{\"w\":", {})); }, "x.safetensors (header):1:");
  auto with = [&](const std::string& entry) { return file_bytes("{" + entry + "}", data); };
  expect_error([&] { parse(with(R"("w":{"dtype":"F33","shape":[8],"data_offsets":[0,32]})")); },
               "tensor w: unknown dtype F33");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[-8],"data_offsets":[0,32]})")); },
               "tensor w: each \"shape\" entry must be a non-negative integer, got -8");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[7],"data_offsets":[0,32]})")); },
               "tensor w: shape [7] F32 needs 28 bytes, its data_offsets hold 32");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[8],"data_offsets":[32,0]})")); },
               "end before begin");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[8]})")); }, "tensor w lacks \"data_offsets\"");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[8],"data_offsets":[0]})")); },
               "\"data_offsets\" must be [begin, end]");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                R"("s":{"dtype":"F32","shape":[5],"data_offsets":[12,32]})")); },
               "tensor s (bytes 12..32) overlaps the tensor before it (ending at 16)");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                                R"("s":{"dtype":"F32","shape":[4],"data_offsets":[16,32]})")); },
               "bytes 12..16 of the data belong to no tensor (a hole before s)");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                                R"("w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]})")); },
               "the header names w twice");
  expect_error([&] { parse(with(R"("__metadata__":{"a":1},"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]})")); },
               "\"__metadata__\" value of a must be a string, got 1");
  expect_error([&] { parse(with(R"("w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,32]})")); },
               "needs more than 2^64 bytes");
  // Control bytes in a name are escaped in the message.
  const std::string m = [&] {
    try {
      parse(with("\"w\\u001b[2J\":{\"dtype\":\"F99\",\"shape\":[8],\"data_offsets\":[0,32]}"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(m.find("unknown dtype F99"), std::string::npos) << m;
  for (char c : m) EXPECT_TRUE(c >= 0x20 && c < 0x7F) << m;
}

TEST(Safetensors, ShardedModelsThroughTheIndex) {
  const std::string dir = temp_dir("shard");
  const T a = make("layer.0.w", "BF16", {4, 4}, 1), b = make("layer.0.s", "F32", {2}, 2),
          c = make("layer.1.w", "BF16", {4, 4}, 3);
  write(dir + "/model-00001-of-00002.safetensors", file_of({a, b}));
  write(dir + "/model-00002-of-00002.safetensors", file_of({c}));
  auto index = [&](const std::string& wm) {
    write(dir + "/model.safetensors.index.json",
          "{\"metadata\":{\"total_size\":88},\"weight_map\":{" + wm + "}}");
  };
  index(R"("layer.0.w":"model-00001-of-00002.safetensors","layer.0.s":"model-00001-of-00002.safetensors",)"
        R"("layer.1.w":"model-00002-of-00002.safetensors")");
  {
    SafetensorsModel m(dir);
    EXPECT_TRUE(m.sharded());
    EXPECT_EQ(m.names(), (std::vector<std::string>{"layer.0.s", "layer.0.w", "layer.1.w"}));
    EXPECT_TRUE(m.has("layer.1.w"));
    EXPECT_FALSE(m.has("layer.2.w"));
    const detail::StView v = m.get("layer.1.w");
    EXPECT_EQ(std::memcmp(v.data, c.bytes.data(), c.bytes.size()), 0);
    EXPECT_NE(v.file->find("model-00002-of-00002.safetensors"), std::string::npos);
    expect_error([&] { m.get("layer.2.w"); },
                 "tensor layer.2.w is missing (not in model.safetensors.index.json)");
  }
  index(R"("layer.0.w":"model-00002-of-00002.safetensors")");
  expect_error([&] { SafetensorsModel(dir).get("layer.0.w"); },
               "puts tensor layer.0.w in shard model-00002-of-00002.safetensors, which has no such tensor");
  index(R"("layer.0.w":"model-00003-of-00003.safetensors")");
  expect_error([&] { SafetensorsModel(dir).get("layer.0.w"); },
               "shard model-00003-of-00003.safetensors (listed by model.safetensors.index.json) is missing");
  index(R"("layer.0.w":"../elsewhere.safetensors")");
  expect_error([&] { SafetensorsModel m(dir); }, "must be a file name in the same directory");
  index(R"("layer.0.w":7)");
  expect_error([&] { SafetensorsModel m(dir); }, "the shard of tensor layer.0.w must be a file name, got 7");
  write(dir + "/model.safetensors.index.json", "{\"metadata\":{}}");
  expect_error([&] { SafetensorsModel m(dir); }, "expected an object with a \"weight_map\" object");
  write(dir + "/model.safetensors.index.json", "{\"weight_map\":{\"a\":");
  expect_error([&] { SafetensorsModel m(dir); }, "malformed JSON");
  // A truncated shard is refused when it is first used, naming the shard.
  index(R"("layer.1.w":"model-00002-of-00002.safetensors")");
  const std::string full = file_of({c});
  write(dir + "/model-00002-of-00002.safetensors", full.substr(0, full.size() - 1));
  expect_error([&] { SafetensorsModel(dir).get("layer.1.w"); }, "model-00002-of-00002.safetensors");

  const std::string empty = temp_dir("none");
  expect_error([&] { SafetensorsModel m(empty); },
               "has neither model.safetensors.index.json nor model.safetensors");
  expect_error([&] { SafetensorsModel m(empty + "/nope"); }, "does not exist");
  expect_error([&] { SafetensorsFile f(empty); }, "must be a regular file");
}

}  // namespace
}  // namespace fusedmoe
