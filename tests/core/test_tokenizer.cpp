// Tokenizer tests against Hugging Face `tokenizers` (oracle: tests/oracle/tokenizer_fixtures.py,
// fixtures under tests/data/tokenizers), plus hand-written tokenizer.json files for the parsing
// and added-token rules.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/tokenizer.h"

namespace {

using trimkv::ErrorKind;
using trimkv::StreamDecoder;
using trimkv::Tokenizer;
namespace fs = std::filesystem;

const std::string kDataDir = std::string(TRIMKV_TEST_DATA_DIR) + "/tokenizers";

const nlohmann::json& expected() {
  static const nlohmann::json kExpected = [] {
    std::ifstream in(kDataDir + "/expected.json");
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
  }();
  return kExpected;
}

// Structural UTF-8 validity (RFC 3629: no overlongs, surrogates or code points > U+10FFFF).
bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 < 0x80) n = 1;
    else if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

// Writes `text` as dir/tokenizer.json in a fresh temporary folder and returns the file path.
std::string write_temp_tokenizer(const std::string& name, const std::string& text) {
  // A per-process suffix keeps concurrent runs of the suite apart.
  static const std::string kRunId = std::to_string(std::random_device{}());
  const fs::path dir = fs::temp_directory_path() / ("trimkv_test_tokenizer_" + kRunId) / name;
  fs::create_directories(dir);
  const fs::path path = dir / "tokenizer.json";
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// Expects `fn` to throw trimkv::Error of `kind` whose message contains every one of `parts`.
template <typename F>
void require_error(F&& fn, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    fn();
    FAIL("no trimkv::Error was thrown");
  } catch (const trimkv::Error& e) {
    INFO("message: " << e.what());
    CHECK(e.kind() == kind);
    for (const auto& part : parts) CHECK(std::string(e.what()).find(part) != std::string::npos);
  }
}

void check_corpus_ids(const std::string& name) {
  const Tokenizer tok = Tokenizer::from_folder(kDataDir + "/" + name);
  const auto& cases = expected().at(name);
  REQUIRE(cases.size() >= 40);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    INFO(name << " text: \"" << text << "\" add_special_tokens=" << c.at("add_special_tokens"));
    CHECK(tok.encode(text, c.at("add_special_tokens").get<bool>()) ==
          c.at("ids").get<std::vector<int32_t>>());
  }
}

void check_corpus_decode(const std::string& name) {
  const Tokenizer tok = Tokenizer::from_folder(kDataDir + "/" + name);
  std::vector<nlohmann::json> cases(expected().at(name).begin(), expected().at(name).end());
  for (const auto& c : expected().at("decode_cases").at(name)) cases.push_back(c);
  for (const auto& c : cases) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    INFO(name << " ids: " << c.at("ids").dump());
    CHECK(tok.decode(ids) == c.at("decoded").get<std::string>());
    CHECK(tok.decode(ids, /*skip_special_tokens=*/true) == c.at("decoded_skip_special").get<std::string>());
  }
}

// Streams `ids` one by one; every chunk must be valid UTF-8; returns the concatenation.
std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder stream(tok, skip_special);
  std::string text;
  for (const int32_t id : ids) {
    const std::string chunk = stream.push(id);
    INFO("chunk after id " << id);
    REQUIRE(is_valid_utf8(chunk));
    text += chunk;
  }
  const std::string tail = stream.flush();
  REQUIRE(is_valid_utf8(tail));
  return text + tail;
}

void check_streaming(const std::string& name) {
  const Tokenizer tok = Tokenizer::from_folder(kDataDir + "/" + name);
  std::vector<int32_t> all;
  for (const auto& c : expected().at(name)) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    all.insert(all.end(), ids.begin(), ids.end());
    CHECK(stream_decode(tok, ids, false) == c.at("decoded").get<std::string>());
  }
  for (const auto& c : expected().at("decode_cases").at(name)) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    INFO("decode case " << c.at("ids").dump());
    all.insert(all.end(), ids.begin(), ids.end());
    CHECK(stream_decode(tok, ids, false) == c.at("decoded").get<std::string>());
    CHECK(stream_decode(tok, ids, true) == c.at("decoded_skip_special").get<std::string>());
  }
  CHECK(stream_decode(tok, all, false) == tok.decode(all, false));
  CHECK(stream_decode(tok, all, true) == tok.decode(all, true));
}

// A hand-written byte-level BPE: "hello" is built by three ranked merges, "Ġw" by one.
// <mask> absorbs the whitespace before it (lstrip), <sep> the whitespace after it (rstrip).
// MERGES is substituted with either encoding of the same merges.
const char* kTinyTokenizer = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 15, "content": "<mask>", "single_word": false, "lstrip": true, "rstrip": false, "normalized": false, "special": true},
    {"id": 16, "content": "<sep>", "single_word": false, "lstrip": false, "rstrip": true, "normalized": false, "special": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                       "</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}
  },
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {
    "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {"<s>": 0, "</s>": 1, "h": 2, "e": 3, "l": 4, "o": 5, "Ġ": 6, "w": 7, "r": 8, "d": 9,
              "he": 10, "ll": 11, "hell": 12, "hello": 13, "Ġw": 14},
    "merges": MERGES
  }
})";

std::string tiny_tokenizer(const std::string& merges) {
  std::string text = kTinyTokenizer;
  text.replace(text.find("MERGES"), 6, merges);
  return text;
}

const char* kMergePairs = R"([["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o"], ["Ġ", "w"]])";
const char* kMergeStrings = R"(["h e", "l l", "he ll", "hell o", "Ġ w"])";

}  // namespace

TEST_CASE("Tokenizer::encode gives HF's ids for every corpus string of the SmolLM2-style tokenizer",
          "[tokenizer]") {
  check_corpus_ids("smollm2");
}

TEST_CASE("Tokenizer::encode gives HF's ids for every corpus string of the Qwen2-style tokenizer",
          "[tokenizer]") {
  check_corpus_ids("qwen2");
}

TEST_CASE("Tokenizer::encode gives HF's ids under other pipeline settings (Split behaviours, "
          "Digits, add_prefix_space, NFKC, added-token flags, templates)", "[tokenizer]") {
  for (const auto& variant : expected().at("pipeline_variants")) {
    const std::string name = variant.at("name");
    nlohmann::json spec;
    {
      std::ifstream in(kDataDir + "/" + variant.at("base").get<std::string>() + "/tokenizer.json");
      spec = nlohmann::json::parse(in);
    }
    spec.merge_patch(variant.at("patch"));
    const Tokenizer tok = Tokenizer::from_file(write_temp_tokenizer("variant", spec.dump()));
    for (const auto& c : variant.at("cases")) {
      INFO(name << ": \"" << c.at("text").get<std::string>() << "\"");
      CHECK(tok.encode(c.at("text").get<std::string>(), c.at("add_special_tokens").get<bool>()) ==
            c.at("ids").get<std::vector<int32_t>>());
    }
  }
}

TEST_CASE("Tokenizer::encode makes NFD and NFC spellings equal under an NFC normalizer", "[tokenizer]") {
  const Tokenizer qwen = Tokenizer::from_folder(kDataDir + "/qwen2");
  CHECK(qwen.encode("cafe\xCC\x81 Ångstro\xCC\x88m") == qwen.encode("café Ångström"));
  // "café" is an added token with normalized = true: its NFD spelling matches it too.
  const int32_t cafe = qwen.token_to_id("café");
  REQUIRE(cafe >= 0);
  CHECK(qwen.encode("cafe\xCC\x81") == std::vector<int32_t>{cafe});
}

TEST_CASE("Tokenizer::decode and skip_special_tokens give HF's text for SmolLM2-style ids", "[tokenizer]") {
  check_corpus_decode("smollm2");
}

TEST_CASE("Tokenizer::decode and skip_special_tokens give HF's text for Qwen2-style ids", "[tokenizer]") {
  check_corpus_decode("qwen2");
}

TEST_CASE("StreamDecoder emits only valid UTF-8 and adds up to the full decode (SmolLM2-style)",
          "[tokenizer]") {
  check_streaming("smollm2");
}

TEST_CASE("StreamDecoder emits only valid UTF-8 and adds up to the full decode (Qwen2-style)",
          "[tokenizer]") {
  check_streaming("qwen2");
}

TEST_CASE("StreamDecoder holds back the bytes of an unfinished character", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_folder(kDataDir + "/smollm2");
  // The emoji spelled byte by byte (decode case 2): nothing comes out until its fourth byte.
  const auto ids = expected().at("decode_cases").at("smollm2").at(2).at("ids").get<std::vector<int32_t>>();
  REQUIRE(ids.size() == 4);
  StreamDecoder stream(tok);
  CHECK(stream.push(ids[0]).empty());
  CHECK(stream.push(ids[1]).empty());
  CHECK(stream.push(ids[2]).empty());
  CHECK(stream.push(ids[3]) == "\xF0\x9F\x99\x82");
  CHECK(stream.flush().empty());
  // An unfinished character at the end becomes U+FFFD on flush.
  CHECK(stream.push(ids[0]).empty());
  CHECK(stream.flush() == "\xEF\xBF\xBD");
}

TEST_CASE("Tokenizer::from_folder reads special token strings and ids from tokenizer_config.json",
          "[tokenizer]") {
  const Tokenizer smol = Tokenizer::from_folder(kDataDir + "/smollm2");
  CHECK(smol.config().bos_token == "<|im_start|>");
  CHECK(smol.config().bos_id == 1);
  CHECK(smol.config().eos_id == 2);
  CHECK(smol.config().unk_id == 0);
  CHECK_FALSE(smol.config().add_bos_token.has_value());
  CHECK(smol.vocab_size() == 384);
  CHECK(smol.token_to_id("<image>") == 382);
  CHECK(smol.id_to_token(382) == "<image>");
  CHECK(smol.is_special(382));
  CHECK_FALSE(smol.is_special(383));  // <end_of_utterance> is a non-special added token
  CHECK_FALSE(smol.is_special(100));

  const Tokenizer qwen = Tokenizer::from_folder(kDataDir + "/qwen2");
  CHECK(qwen.config().bos_id == -1);
  CHECK(qwen.config().eos_id == qwen.token_to_id("<|im_end|>"));
  CHECK(qwen.config().pad_id == 0);
  CHECK(qwen.vocab_size() == 384);

  // from_file alone knows nothing of tokenizer_config.json.
  const Tokenizer bare = Tokenizer::from_file(kDataDir + "/qwen2/tokenizer.json");
  CHECK(bare.config().eos_id == -1);
  CHECK(bare.encode("hello <|im_end|>") == qwen.encode("hello <|im_end|>"));
}

TEST_CASE("Tokenizer::from_file rejects a non-BPE model as Unsupported, naming the file and type",
          "[tokenizer]") {
  const std::string path = kDataDir + "/bad/wordpiece/tokenizer.json";
  require_error([&] { Tokenizer::from_file(path); }, ErrorKind::Unsupported, {path, "WordPiece"});
}

TEST_CASE("Tokenizer::from_file rejects malformed JSON as a Format error naming the file", "[tokenizer]") {
  const std::string path = kDataDir + "/bad/malformed/tokenizer.json";
  require_error([&] { Tokenizer::from_file(path); }, ErrorKind::Format, {path});
}

TEST_CASE("Tokenizer::from_file refuses contradictions: two tokens with one id, one key twice, ids that are not "
          "integers", "[tokenizer][bad-input]") {
  trimkv::test::ScratchDir dir("tok-contradict");
  const std::string path = dir.file("tokenizer.json");
  auto with_model = [&](const std::string& model) {
    trimkv::test::write_text(path, R"({"version": "1.0", "added_tokens": [], "model": )" + model + "}");
  };
  with_model(R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 1}, "merges": []})");
  require_error([&] { Tokenizer::from_file(path); }, ErrorKind::Format, {path, "id 1 to two tokens", "'b'", "'c'"});
  with_model(R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "a": 2}, "merges": []})");
  require_error([&] { Tokenizer::from_file(path); }, ErrorKind::Format, {path, "the key 'a' appears twice"});
  with_model(R"({"type": "BPE", "vocab": {"a": 0, "b": "1"}, "merges": []})");
  require_error([&] { Tokenizer::from_file(path); }, ErrorKind::Format, {path, "token 'b'", "not an integer"});
}

TEST_CASE("Tokenizer::from_file rejects a tokenizer.json without \"model\" as a Format error",
          "[tokenizer]") {
  const std::string path = kDataDir + "/bad/no_model/tokenizer.json";
  require_error([&] { Tokenizer::from_file(path); }, ErrorKind::Format, {path, "model"});
  require_error([&] { Tokenizer::from_folder(kDataDir + "/bad/no_model"); }, ErrorKind::Format, {path});
}

TEST_CASE("Tokenizer::from_file reports a missing file as an Io error naming it", "[tokenizer]") {
  const std::string path = kDataDir + "/does/not/exist/tokenizer.json";
  require_error([&] { Tokenizer::from_file(path); }, ErrorKind::Io, {path});
}

TEST_CASE("Tokenizer rejects unsupported pipeline stages, naming the file and the type", "[tokenizer]") {
  std::string text = tiny_tokenizer(kMergePairs);
  text.replace(text.find("\"normalizer\": null"), 18, R"("normalizer": {"type": "Lowercase"})");
  const std::string path = write_temp_tokenizer("lowercase", text);
  require_error([&] { Tokenizer::from_file(path); }, ErrorKind::Unsupported, {path, "Lowercase"});

  text = tiny_tokenizer(kMergePairs);
  text.replace(text.find("\"type\": \"ByteLevel\", \"add_prefix_space\": false"), 21,
               R"("type": "Metaspace", )");
  const std::string path2 = write_temp_tokenizer("metaspace", text);
  require_error([&] { Tokenizer::from_file(path2); }, ErrorKind::Unsupported, {path2, "Metaspace"});

  text = tiny_tokenizer(R"([["h", "e"], ["x", "y"]])");
  const std::string path3 = write_temp_tokenizer("bad_merge", text);
  require_error([&] { Tokenizer::from_file(path3); }, ErrorKind::Format, {path3, "merge 1"});
}

TEST_CASE("Tokenizer parses merges given as [a, b] pairs and as \"a b\" strings alike", "[tokenizer]") {
  const Tokenizer pairs = Tokenizer::from_file(write_temp_tokenizer("pairs", tiny_tokenizer(kMergePairs)));
  const Tokenizer strings = Tokenizer::from_file(write_temp_tokenizer("strings", tiny_tokenizer(kMergeStrings)));
  for (const Tokenizer* tok : {&pairs, &strings}) {
    // "hello" -> h e l l o -> (h e) -> (l l) -> (he ll) -> (hell o); " world" -> (Ġ w) o r l d.
    CHECK(tok->encode("hello world", false) == std::vector<int32_t>{13, 14, 5, 8, 4, 9});
    CHECK(tok->encode("hello", false) == std::vector<int32_t>{13});
    CHECK(tok->encode("helo", false) == std::vector<int32_t>{10, 4, 5});
    CHECK(tok->decode({13, 14, 5, 8, 4, 9}) == "hello world");
  }
}

TEST_CASE("Tokenizer applies a TemplateProcessing post-processor only with add_special_tokens",
          "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_file(write_temp_tokenizer("template", tiny_tokenizer(kMergePairs)));
  CHECK(tok.encode("hello") == std::vector<int32_t>{0, 13, 1});
  CHECK(tok.encode("hello", false) == std::vector<int32_t>{13});
  CHECK(tok.encode("") == std::vector<int32_t>{0, 1});
  CHECK(tok.encode("", false).empty());
  CHECK(tok.decode({0, 13, 1}) == "<s>hello</s>");
  CHECK(tok.decode({0, 13, 1}, true) == "hello");
}

TEST_CASE("Added tokens with lstrip / rstrip absorb the adjacent whitespace", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_file(write_temp_tokenizer("strip", tiny_tokenizer(kMergePairs)));
  // <mask> (lstrip) takes the spaces before it, not after: " w" stays "Ġw".
  CHECK(tok.encode("hello  <mask> w", false) == std::vector<int32_t>{13, 15, 14});
  // <sep> (rstrip) takes the whitespace after it, not before.
  CHECK(tok.encode("he<sep> \t hello", false) == std::vector<int32_t>{10, 16, 13});
  CHECK(tok.encode("he <sep>hello", false) == std::vector<int32_t>{10, 6, 16, 13});
  // Adjacent tokens, and a token at the start with nothing to strip.
  CHECK(tok.encode("<mask><sep><mask>", false) == std::vector<int32_t>{15, 16, 15});
  // A partial token string is ordinary text (characters without a token are dropped, as in HF).
  CHECK(tok.encode("he<se", false) == std::vector<int32_t>{10, 3});
  CHECK(tok.vocab_size() == 17);
  CHECK(tok.token_to_id("<mask>") == 15);
  CHECK(tok.token_to_id("hello") == 13);
  CHECK(tok.token_to_id("nope") == -1);
  CHECK(tok.id_to_token(14) == "Ġw");
  CHECK(tok.id_to_token(99).empty());
  CHECK(tok.is_special(15));
  CHECK_FALSE(tok.is_special(16));
}

TEST_CASE("Tokenizer::encode rejects text that is not valid UTF-8 as an Input error", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_folder(kDataDir + "/smollm2");
  require_error([&] { tok.encode("ok \xE2\x82 broken"); }, ErrorKind::Input, {"UTF-8"});
}

TEST_CASE("Tokenizer::encode may be called from several threads at once", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_folder(kDataDir + "/qwen2");
  const auto& cases = expected().at("qwen2");
  std::atomic<int> n_mismatch{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round)
        for (size_t k = t; k < cases.size(); ++k)
          if (tok.encode(cases[k].at("text").get<std::string>(), cases[k].at("add_special_tokens").get<bool>()) !=
              cases[k].at("ids").get<std::vector<int32_t>>())
            ++n_mismatch;
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(n_mismatch == 0);
}

TEST_CASE("Tokenizer::encode applies NFD, NFKD, NFKC and a Sequence as Hugging Face tokenizers does",
          "[tokenizer]") {
  // tests/oracle/normalizer_fixtures.py: the SmolLM2 tokenizer.json with each normalizer, ids by
  // the `tokenizers` library for texts whose normal forms differ.
  const nlohmann::json src = trimkv::test::read_json(kDataDir + "/smollm2/tokenizer.json");
  const nlohmann::json fixture = trimkv::test::read_json(kDataDir + "/normalizers.json");
  trimkv::test::ScratchDir dir("normalizers");
  REQUIRE(fixture.at("normalizers").size() == 4);
  for (const auto& [name, entry] : fixture.at("normalizers").items()) {
    nlohmann::json cfg = src;
    cfg["normalizer"] = entry.at("normalizer");
    trimkv::test::write_text(dir.file("tokenizer.json"), cfg.dump());
    const Tokenizer tok = Tokenizer::from_file(dir.file("tokenizer.json"));
    for (const auto& c : entry.at("cases")) {
      INFO(name << ": \"" << c.at("text").get<std::string>() << "\"");
      CHECK(tok.encode(c.at("text").get<std::string>(), false) == c.at("ids").get<std::vector<int32_t>>());
    }
  }
}
