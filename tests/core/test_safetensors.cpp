// WeightStore / safetensors reader: formats, dtypes, sharding and every malformed-file error.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <cstring>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/safetensors.h"
#include "trimkv/core/weight_store.h"

using namespace trimkv;
using trimkv::test::ScratchDir;

namespace {

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A safetensors file from a raw JSON header and data buffer (for malformed cases).
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               uint64_t header_len_override = 0) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header_len_override ? header_len_override : header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors round-trips float32 tensors and metadata", "[weights]") {
  ScratchDir dir("st");
  write_safetensors(dir.file("a.safetensors"),
                    {{"x", DType::F32, {2, 3}, float_bytes({1, 2, 3, 4, 5, 6})},
                     {"y", DType::F32, {1}, float_bytes({7})}},
                    {{"kind", "test"}});
  SafetensorsFile f(dir.file("a.safetensors"));
  REQUIRE(f.tensors().size() == 2);
  REQUIRE(f.metadata().at("kind") == "test");
  const auto& x = f.tensors().at("x");
  REQUIRE(x.shape == std::vector<int64_t>{2, 3});
  at::Tensor t = tensor_to_float(x);
  REQUIRE(t.sum().item<float>() == 21.0f);
}

TEST_CASE("WeightStore converts F16 and BF16 to float32 exactly", "[weights]") {
  ScratchDir dir("dt");
  at::Tensor ref = at::tensor({0.5f, -2.0f, 3.25f, 1024.0f});
  at::Tensor h = ref.to(at::kHalf).contiguous(), b = ref.to(at::kBFloat16).contiguous();
  std::vector<uint8_t> hb(8), bb(8);
  std::memcpy(hb.data(), h.data_ptr(), 8);
  std::memcpy(bb.data(), b.data_ptr(), 8);
  write_safetensors(dir.file("m.safetensors"),
                    {{"h", DType::F16, {4}, hb}, {"b", DType::BF16, {4}, bb}});
  WeightStore ws = WeightStore::open_file(dir.file("m.safetensors"));
  REQUIRE(at::equal(ws.load({"h"}, {4}), ref));
  REQUIRE(at::equal(ws.load({"b"}, {4}), ref));
  REQUIRE(ws.load({"missing", "b"}, {}).size(0) == 4);  // aliases: the first that exists
}

TEST_CASE("WeightStore reads a sharded checkpoint through its index", "[weights]") {
  WeightStore ws = WeightStore::open_folder(test::model_dir("llama_tied"));
  REQUIRE(ws.contains("model.embed_tokens.weight"));
  REQUIRE(ws.contains("model.layers.2.mlp.down_proj.weight"));
  REQUIRE(ws.names().size() > 20);
}

TEST_CASE("safetensors errors name the file and the problem", "[weights][bad-input]") {
  ScratchDir dir("bad");
  SECTION("missing file") {
    auto msg = error_of([&] { SafetensorsFile f(dir.file("nope.safetensors")); });
    REQUIRE_THAT(msg, Catch::Contains("nope.safetensors"));
  }
  SECTION("0-byte file") {
    test::write_text(dir.file("empty.safetensors"), "");
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("empty.safetensors")); }),
                 Catch::Contains("empty.safetensors") && Catch::Contains("8-byte"));
  }
  SECTION("header length larger than the file") {
    write_raw(dir.file("h.safetensors"), "{}", "", 1000);
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("h.safetensors")); }),
                 Catch::Contains("h.safetensors") && Catch::Contains("header length 1000"));
  }
  SECTION("truncated data buffer") {
    write_safetensors(dir.file("t.safetensors"), {{"w", DType::F32, {4}, float_bytes({1, 2, 3, 4})}});
    std::string bytes = test::read_bytes(dir.file("t.safetensors"));
    test::write_text(dir.file("t.safetensors"), bytes.substr(0, bytes.size() - 5));
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("t.safetensors")); }),
                 Catch::Contains("'w'") && Catch::Contains("truncated"));
  }
  SECTION("malformed JSON header") {
    write_raw(dir.file("j.safetensors"), "{\"w\": {\"dtype\": ", "");
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("j.safetensors")); }),
                 Catch::Contains("malformed JSON"));
  }
  SECTION("a header naming one tensor twice (a lenient reader would keep either)") {
    write_raw(dir.file("twice.safetensors"),
              R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                  "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
              std::string(8, '\0'));
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("twice.safetensors")); }),
                 Catch::Contains("twice.safetensors") && Catch::Contains("the key 'w' appears twice"));
  }
  SECTION("a header over the format's 100 MiB limit, in a file large enough to hold it") {
    write_raw(dir.file("big.safetensors"), "{}", "", 200ull << 20);
    std::filesystem::resize_file(dir.file("big.safetensors"), 300ull << 20);  // sparse: no disk used
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("big.safetensors")); }),
                 Catch::Contains("big.safetensors") && Catch::Contains("over the format's limit") &&
                     !Catch::Contains("exceeds the file"));
  }
  SECTION("unknown dtype") {
    write_raw(dir.file("d.safetensors"),
              R"({"w": {"dtype": "F8_E9", "shape": [1], "data_offsets": [0, 1]}})", "x");
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("d.safetensors")); }),
                 Catch::Contains("unknown dtype 'F8_E9'") && Catch::Contains("'w'"));
  }
  SECTION("out-of-range data_offsets") {
    write_raw(dir.file("o.safetensors"),
              R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", "1234");
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("o.safetensors")); }),
                 Catch::Contains("outside the data buffer"));
  }
  SECTION("overlapping data_offsets") {
    write_raw(dir.file("v.safetensors"),
              R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
              std::string(12, '\0'));
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("v.safetensors")); }),
                 Catch::Contains("overlap"));
  }
  SECTION("size that disagrees with shape x dtype") {
    write_raw(dir.file("s.safetensors"),
              R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", std::string(8, '\0'));
    REQUIRE_THAT(error_of([&] { SafetensorsFile f(dir.file("s.safetensors")); }),
                 Catch::Contains("need 12"));
  }
}

TEST_CASE("WeightStore reports a wrong shape with both shapes and the file", "[weights][bad-input]") {
  ScratchDir dir("shape");
  write_safetensors(dir.file("m.safetensors"), {{"w", DType::F32, {2, 2}, float_bytes({1, 2, 3, 4})}});
  WeightStore ws = WeightStore::open_file(dir.file("m.safetensors"));
  auto msg = error_of([&] { ws.load({"w"}, {4, 1}); });
  REQUIRE_THAT(msg, Catch::Contains("'w'") && Catch::Contains("[2, 2]") && Catch::Contains("[4, 1]"));
  REQUIRE_THAT(error_of([&] { ws.load({"q", "r"}, {}); }),
               Catch::Contains("lacks required tensor 'q', 'r'"));
}
