// Tokenizer::from_gguf: a GGUF file's vocabulary as the tokenizer.json its model ships.
//
// GGUF keeps the byte-level BPE's pieces (tokenizer.ggml.tokens, already in byte-level alphabet),
// their types (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), the merges, and
// names the pre-tokenizer by tokenizer.ggml.pre; llama.cpp maps that name to split expressions.
// The table below gives each name the pre-tokenizer of the Hugging Face tokenizer.json it was
// made from (facts from llama.cpp's vocabulary code and the models' own tokenizer files).
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_impl.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gguf.h"
#include "trimkv/core/tokenizer.h"

namespace trimkv {

namespace {

using json = nlohmann::json;

// GPT-2's split expression is ByteLevel's own (use_regex); the others are Split steps before a
// ByteLevel that only maps bytes.
const char* const kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split_then_bytes(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           json::array({{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                        byte_level(false)})}};
}

struct PreTokenizerEntry {
  const char* name;
  json (*make)();
  bool nfc;            // the tokenizer.json normalises to NFC first (Qwen2's)
  bool ignore_merges;  // whole-vocabulary words skip the merges (Llama 3's)
};

const PreTokenizerEntry kPreTokenizers[] = {
    {"default", [] { return byte_level(true); }, false, false},
    {"gpt2", [] { return byte_level(true); }, false, false},
    {"smollm",
     [] {
       return json{{"type", "Sequence"},
                   {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}};
     },
     false, false},
    {"llama-bpe", [] { return split_then_bytes(kLlama3Split); }, false, true},
    {"smaug-bpe", [] { return split_then_bytes(kLlama3Split); }, false, true},
    {"qwen2", [] { return split_then_bytes(kQwen2Split); }, true, false},
    {"deepseek-r1-qwen", [] { return split_then_bytes(kQwen2Split); }, true, false},
};

std::string known_pre_tokenizers() {
  std::string s;
  for (const auto& e : kPreTokenizers) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  const std::string& path = file.path();
  const std::string model = file.get_string("tokenizer.ggml.model").value_or("");
  TRIMKV_CHECK(!model.empty(), Format, "'", path, "' has no vocabulary (tokenizer.ggml.model is missing)");
  TRIMKV_CHECK(model == "gpt2", Unsupported, "'", path, "': tokenizer.ggml.model '", model,
               "' is not supported (byte-level BPE, 'gpt2', is; SentencePiece vocabularies are not yet)");
  const std::string pre = file.get_string("tokenizer.ggml.pre").value_or("default");
  const PreTokenizerEntry* entry = nullptr;
  for (const auto& e : kPreTokenizers)
    if (pre == e.name) entry = &e;
  TRIMKV_CHECK(entry, Unsupported, "'", path, "': tokenizer.ggml.pre '", pre, "' is not a pre-tokenizer this ",
               "reader knows (", known_pre_tokenizers(), ")");

  const auto* tokens = file.get_array("tokenizer.ggml.tokens", GgufType::STRING);
  TRIMKV_CHECK(tokens && !tokens->empty(), Format, "'", path, "' has no tokenizer.ggml.tokens");
  const auto* types = file.get_array("tokenizer.ggml.token_type", GgufType::I64);
  TRIMKV_CHECK(!types || types->size() == tokens->size(), Format, "'", path, "': tokenizer.ggml.token_type has ",
               types ? types->size() : 0, " entries for ", tokens->size(), " tokens");
  const auto* merges = file.get_array("tokenizer.ggml.merges", GgufType::STRING);
  TRIMKV_CHECK(merges, Format, "'", path, "' has no tokenizer.ggml.merges (a BPE vocabulary needs them)");

  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens->size(); ++id) {
    const std::string& piece = (*tokens)[id].s;
    const int64_t type = types ? (*types)[id].i : kNormal;
    if (type == kControl || type == kUserDefined) {
      added.push_back({{"id", id}, {"content", piece}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", type == kControl}});
    }
    vocab[piece] = id;  // a repeated piece keeps its last id, as a JSON vocabulary would
  }
  json merge_list = json::array();
  for (const auto& m : *merges) merge_list.push_back(m.s);

  const int64_t n = static_cast<int64_t>(tokens->size());
  auto token_id = [&](const char* key) -> int32_t {
    const auto id = file.get_int(key);
    if (!id) return -1;
    TRIMKV_CHECK(*id >= 0 && *id < n, Format, "'", path, "': ", key, " ", *id, " is not a token id (", n,
                 " tokens)");
    return static_cast<int32_t>(*id);
  };
  const int32_t bos = token_id("tokenizer.ggml.bos_token_id"), eos = token_id("tokenizer.ggml.eos_token_id"),
                pad = token_id("tokenizer.ggml.padding_token_id"), unk = token_id("tokenizer.ggml.unknown_token_id");
  const std::optional<bool> add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  const std::optional<bool> add_eos = file.get_bool("tokenizer.ggml.add_eos_token");

  json root = {{"version", "1.0"},
               {"added_tokens", added},
               {"normalizer", entry->nfc ? json{{"type", "NFC"}} : json()},
               {"pre_tokenizer", entry->make()},
               {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
               {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"ignore_merges", entry->ignore_merges}}}};
  // BOS / EOS the vocabulary asks to add, as a template around the text.
  const bool with_bos = add_bos.value_or(false) && bos >= 0, with_eos = add_eos.value_or(false) && eos >= 0;
  if (with_bos || with_eos) {
    json single = json::array(), specials = json::object();
    auto special = [&](int32_t id) {
      const std::string& piece = (*tokens)[static_cast<size_t>(id)].s;
      specials[piece] = {{"id", piece}, {"ids", {id}}, {"tokens", {piece}}};
      return json{{"SpecialToken", {{"id", piece}, {"type_id", 0}}}};
    };
    if (with_bos) single.push_back(special(bos));
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (with_eos) single.push_back(special(eos));
    root["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", single},
                              {"special_tokens", specials}};
  }

  Tokenizer t = from_json(root, path + " (tokenizer.ggml.*)");
  auto impl = std::const_pointer_cast<Impl>(t.m_impl);  // sole owner: not yet shared
  TokenizerConfig& c = impl->config;
  auto piece = [&](int32_t id) { return id >= 0 ? (*tokens)[static_cast<size_t>(id)].s : std::string(); };
  c.bos_token = piece(bos), c.eos_token = piece(eos), c.pad_token = piece(pad), c.unk_token = piece(unk);
  c.bos_id = bos, c.eos_id = eos, c.pad_id = pad, c.unk_id = unk;
  c.add_bos_token = add_bos;
  c.add_eos_token = add_eos;
  return t;
}

}  // namespace trimkv
