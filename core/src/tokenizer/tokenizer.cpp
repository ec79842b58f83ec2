#include "trimkv/core/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"
#include "trimkv/core/error.h"
#include "trimkv/core/json_input.h"

namespace trimkv {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, path, ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  TRIMKV_CHECK(!in.bad(), Io, path, ": read error");
  return ss.str();
}

nlohmann::json parse_json(const std::string& path) {
  return parse_json_input(read_file(path), path);
}

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// A token field of tokenizer_config.json: "text", null, or {"content": "text", ...}.
std::string config_token(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return {};
}

std::optional<bool> optional_flag(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || !it->is_boolean()) return std::nullopt;
  return it->get<bool>();
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : m_impl(std::move(impl)) {}

Tokenizer Tokenizer::from_file(const std::string& path) { return from_json(parse_json(path), path); }

Tokenizer Tokenizer::from_json(const nlohmann::json& root, const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  try {
    TRIMKV_CHECK(root.is_object() && root.contains("model") && root.at("model").is_object(), Format,
                 path, ": tokenizer.json has no \"model\" object");
    const auto& model = root.at("model");
    // Files written by old versions of `tokenizers` may omit the type of a BPE model.
    const std::string type = model.contains("type") ? model.at("type").get<std::string>()
                             : model.contains("merges") ? "BPE" : "(none)";
    TRIMKV_CHECK(type == "BPE", Unsupported, path, ": unsupported tokenizer model type '", type,
                 "' (only BPE is supported)");
    auto section = [&](const char* key) {
      const auto it = root.find(key);
      return it == root.end() ? nlohmann::json() : *it;
    };
    impl->normalizer = make_normalizer(section("normalizer"), path);
    impl->pre_tokenizer = make_pre_tokenizer(section("pre_tokenizer"), path);
    impl->model = std::make_unique<BpeModel>(model, path);
    impl->added = AddedVocabulary(section("added_tokens"), impl->normalizer.get(), path);
    impl->post_processor = make_post_processor(section("post_processor"), path);
    impl->decoder = make_decoder(section("decoder"), path);
  } catch (const nlohmann::json::exception& e) {
    TRIMKV_FAIL(Format, path, ": malformed tokenizer.json: ", e.what());
  }
  impl->vocab_size = std::max(impl->model->max_id(), impl->added.max_id()) + 1;
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_folder(const std::string& dir) {
  const Tokenizer base = from_file(dir + "/tokenizer.json");
  const std::string config_path = dir + "/tokenizer_config.json";
  if (!file_exists(config_path)) return base;

  auto impl = std::const_pointer_cast<Impl>(base.m_impl);  // sole owner: not yet shared
  const nlohmann::json config = parse_json(config_path);
  TRIMKV_CHECK(config.is_object(), Format, config_path, ": expected a JSON object");
  TokenizerConfig& c = impl->config;
  try {
    c.bos_token = config_token(config, "bos_token");
    c.eos_token = config_token(config, "eos_token");
    c.pad_token = config_token(config, "pad_token");
    c.unk_token = config_token(config, "unk_token");
    c.add_bos_token = optional_flag(config, "add_bos_token");
    c.add_eos_token = optional_flag(config, "add_eos_token");
  } catch (const nlohmann::json::exception& e) {
    TRIMKV_FAIL(Format, config_path, ": malformed tokenizer_config.json: ", e.what());
  }
  auto id_of = [&](const std::string& token) { return token.empty() ? -1 : base.token_to_id(token); };
  c.bos_id = id_of(c.bos_token);
  c.eos_id = id_of(c.eos_token);
  c.pad_id = id_of(c.pad_token);
  c.unk_id = id_of(c.unk_token);
  return base;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *m_impl;
  const size_t n_valid = utf8::valid_prefix_length(text);
  TRIMKV_CHECK(n_valid == text.size(), Input, "text to tokenize is not valid UTF-8 (at byte ",
               n_valid, " of ", text.size(), ")");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (auto& piece : m.added.extract_and_normalize(text, m.normalizer.get())) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    std::vector<std::string> words{std::move(piece.text)};
    if (m.pre_tokenizer) m.pre_tokenizer->pre_tokenize(words);
    for (const auto& word : words) m.model->tokenize(word, ids);
  }
  if (m.post_processor) m.post_processor->process(ids, add_special_tokens);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *m_impl;
  std::string bytes;
  bool first = true;
  for (const int32_t id : ids) {
    const std::string* token = m.token_of(id);
    if (token == nullptr || (skip_special_tokens && m.is_special(id))) continue;
    m.decoder->append_token(*token, first, bytes);
    first = false;
  }
  std::string text;
  utf8::append_lossy(text, bytes, /*final=*/true);
  return text;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  const int32_t id = m_impl->added.token_to_id(token);
  return id >= 0 ? id : m_impl->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* token = m_impl->token_of(id);
  return token ? *token : std::string();
}

bool Tokenizer::is_special(int32_t id) const { return m_impl->is_special(id); }
int32_t Tokenizer::vocab_size() const { return m_impl->vocab_size; }
const TokenizerConfig& Tokenizer::config() const { return m_impl->config; }
const std::string& Tokenizer::path() const { return m_impl->path; }

}  // namespace trimkv
