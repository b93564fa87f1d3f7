// libFuzzer target: the safetensors header parser (parse_safetensors_header) on whole files held
// in memory. Built and run by scripts/fuzz.sh under ASan + UBSan, seeded with
// tests/fuzz/safetensors_seeds.
//
// A finding is: a crash or sanitizer report, a hang or a memory blow-up, a leak, an exception
// other than fusedmoe::Error, a message with a byte outside printable ASCII or above 2 KB, or an
// accepted header that breaks the format's rules (a tensor past the data, bytes that do not match
// its shape, tensors that overlap or leave a hole).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "checkpoint/safetensors.hpp"
#include "fusedmoe/error.hpp"

namespace {

void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_safetensors: %s: %.400s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fusedmoe::detail;
  try {
    const StHeader h = parse_safetensors_header(data, size, "fuzz.safetensors");
    if (h.data_start > size) fail("data start past the end", std::to_string(h.data_start));
    uint64_t at = 0;
    for (const StTensor& t : h.tensors) {
      if (t.begin != at) fail("accepted a hole or an overlap", t.name);
      unsigned __int128 want = st_dtype_bytes(t.dtype);
      for (int64_t d : t.shape) want *= uint64_t(d);
      if (want != t.bytes()) fail("accepted a byte count that does not match the shape", t.name);
      at = t.end;
    }
    if (at != size - h.data_start) fail("accepted trailing bytes", std::to_string(at));
  } catch (const fusedmoe::Error& e) {
    const std::string m = e.what();
    if (m.size() > 2048) fail("message above 2 KB", m);
    for (unsigned char c : m)
      if (c < 0x20 || c >= 0x7F) fail("message with a raw byte", m);
  }
  return 0;
}
