// torch.save files are checked before LibTorch's zip reader and unpickler see them
// (core/src/gates/pth_check.h): corruptions of a real one (the authors'-layout fixture) are refused
// by name, never handed on. The gates fuzz target found LibTorch's reader using freed memory on
// such files (tests/fuzz/regressions/gates).
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gate_file.h"

using namespace trimkv;

namespace {

const std::string kFixture = test::data_dir() + "/gates/trimkv_weights.pth";

// The fixture with `edit` applied, written to a scratch file; the message load_gates refuses it with.
template <typename Edit>
std::string refusal(Edit edit) {
  test::ScratchDir dir("pth");
  std::string bytes = test::read_bytes(kFixture);
  edit(bytes);
  const std::string path = dir.file("gates.pth");
  test::write_text(path, bytes);
  try {
    load_gates(path);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::Format);
    CHECK_THAT(e.what(), Catch::Contains(path));
    return e.what();
  }
  FAIL("accepted");
  return "";
}

size_t find(const std::string& bytes, const std::string& what, bool last = false) {
  const size_t at = last ? bytes.rfind(what) : bytes.find(what);
  REQUIRE(at != std::string::npos);
  return at;
}

void put32(std::string& bytes, size_t at, uint32_t v) { std::memcpy(&bytes[at], &v, 4); }

}  // namespace

TEST_CASE("torch.save files: the real one loads; broken zips are refused before LibTorch reads them",
          "[gates][pth][bad-input]") {
  REQUIRE_NOTHROW(load_gates(kFixture));
  CHECK_THAT(refusal([](std::string& b) { b.resize(b.size() / 2); }), Catch::Contains("end-of-directory"));
  CHECK_THAT(refusal([](std::string& b) { put32(b, find(b, std::string("PK\x05\x06", 4), true) + 16, 0x7fffff00u); }),
             Catch::Contains("central directory lies outside"));
  CHECK_THAT(refusal([](std::string& b) {  // the first directory entry's local-header offset
               put32(b, find(b, std::string("PK\x01\x02", 4)) + 42, 77);
             }),
             Catch::Contains("no local header where the directory says"));
  CHECK_THAT(refusal([](std::string& b) { b[find(b, std::string("PK\x01\x02", 4)) + 10] = 8; }),
             Catch::Contains("is compressed"));
  CHECK_THAT(refusal([](std::string& b) {  // the directory's "data/1" renamed "data/0"
               b[find(b, "trimkv_weights/data/1", true) + 20] = '0';
             }),
             Catch::Contains("'trimkv_weights/data/0' appears twice"));
}

TEST_CASE("torch.save files: pickles with opcodes no state dict needs, bad memo reads or stack underflow are "
          "refused", "[gates][pth][bad-input]") {
  // data.pkl is the first entry: its bytes start after the first local header.
  auto pickle_at = [](const std::string& b) {
    uint16_t name_len, extra_len;
    std::memcpy(&name_len, &b[26], 2);
    std::memcpy(&extra_len, &b[28], 2);
    return size_t{30} + name_len + extra_len;
  };
  CHECK_THAT(refusal([&](std::string& b) { b[pickle_at(b) + 2] = 'i'; }),  // INST: arbitrary code in a real pickle
             Catch::Contains("uses pickle opcode 0x69"));
  CHECK_THAT(refusal([&](std::string& b) { b[pickle_at(b) + 2] = 'R'; }),  // REDUCE with nothing to reduce
             Catch::Contains("pops more than its stack holds"));
  CHECK_THAT(refusal([&](std::string& b) {
               b[pickle_at(b) + 2] = 'h';  // BINGET 200 before anything was stored
               b[pickle_at(b) + 3] = static_cast<char>(200);
             }),
             Catch::Contains("reads a memo entry never stored"));
  CHECK_THAT(refusal([&](std::string& b) { b[pickle_at(b) + 1] = 9; }), Catch::Contains("pickle protocol 9"));
}

TEST_CASE("torch.save files: a tensor whose view reaches past its storage is refused before it is read",
          "[pth][bad-input]") {
  // Found by the 10-minute gates campaign: LibTorch builds the tensor from the pickle's sizes and
  // strides without checking its storage (the zip record), and copying it read past the record.
  const std::string path = std::string(TRIMKV_SOURCE_DIR) + "/tests/fuzz/regressions/gates/pth-view-past-storage.pth";
  try {
    load_gates(path);
    FAIL("accepted");
  } catch (const Error& e) {
    CAPTURE(e.what());
    REQUIRE(e.kind() == ErrorKind::Format);
    // Our check (LibTorch 1.13), or LibTorch 2.x's own unpickler's, which runs before it.
    REQUIRE_THAT(e.what(), (Catch::Contains("reaches past its storage") || Catch::Contains("require a storage of at least")) &&
                               Catch::Contains(path));
  }
}
