#include "trimkv/core/model_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"
#include "trimkv/core/json_input.h"
#include "trimkv/core/gguf_model.h"
#include "trimkv/core/text_family.h"

namespace trimkv {

namespace {

using json = nlohmann::json;

json read_json(const std::string& path) {
  TRIMKV_CHECK(std::filesystem::exists(path), Io, "'", path, "' does not exist");
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, "cannot read '", path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j = parse_json_input(text, "'" + path + "'");
  TRIMKV_CHECK(j.is_object(), Format, "'", path, "' is not a JSON object");
  return j;
}

// Looks a field up in the text section first, then at top level (flat configs).
struct Fields {
  const json& text;
  const json& top;
  const std::string& path;

  const json* get(const char* key) const {
    if (text.contains(key) && !text[key].is_null()) return &text[key];
    if (top.contains(key) && !top[key].is_null()) return &top[key];
    return nullptr;
  }
  int64_t required_int(const char* key) const {
    const json* v = get(key);
    TRIMKV_CHECK(v, Config, "'", path, "' lacks required field '", key, "'");
    TRIMKV_CHECK(v->is_number_integer(), Config, "'", path, "': field '", key,
                 "' must be an integer, got ", v->dump());
    const int64_t x = v->get<int64_t>();
    TRIMKV_CHECK(x > 0, Config, "'", path, "': field '", key, "' must be positive, got ", x);
    return x;
  }
  int64_t int_or(const char* key, int64_t fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    TRIMKV_CHECK(v->is_number_integer(), Config, "'", path, "': field '", key,
                 "' must be an integer, got ", v->dump());
    return v->get<int64_t>();
  }
  double double_or(const char* key, double fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    TRIMKV_CHECK(v->is_number(), Config, "'", path, "': field '", key, "' must be a number, got ",
                 v->dump());
    return v->get<double>();
  }
};

std::vector<int32_t> ids_of(const json& v, const std::string& path, const char* key) {
  std::vector<int32_t> out;
  if (v.is_number_integer()) {
    out.push_back(v.get<int32_t>());
  } else if (v.is_array()) {
    for (const auto& x : v) {
      TRIMKV_CHECK(x.is_number_integer(), Config, "'", path, "': field '", key,
                   "' must hold integers, got ", v.dump());
      out.push_back(x.get<int32_t>());
    }
  } else if (!v.is_null()) {
    TRIMKV_FAIL(Config, "'", path, "': field '", key, "' must be an integer or a list, got ", v.dump());
  }
  return out;
}

void parse_rope(const Fields& f, RopeConfig& rope) {
  rope.theta = f.double_or("rope_theta", rope.theta);
  // A family's multimodal rotary default holds unless the settings give their own section.
  const json* params = f.get("rope_parameters");  // transformers v5
  if (!params) params = f.get("rope_scaling");    // transformers v4
  if (!params) return;
  TRIMKV_CHECK(params->is_object(), Config, "'", f.path, "': rope settings must be an object, got ",
               params->dump());
  const json& p = *params;
  if (p.contains("rope_theta")) rope.theta = p["rope_theta"].get<double>();
  std::string type = "default";
  if (p.contains("rope_type")) type = p["rope_type"].get<std::string>();
  else if (p.contains("type")) type = p["type"].get<std::string>();
  // Multimodal rope: the legacy type "mrope" is the default rotation with sections.
  if (type == "mrope") type = "default";
  if (p.contains("mrope_section")) {
    TRIMKV_CHECK(p["mrope_section"].is_array() && !p["mrope_section"].empty(), Config, "'", f.path,
                 "': mrope_section must be a list of integers, got ", p["mrope_section"].dump());
    rope.mrope_section.clear();
    for (const auto& x : p["mrope_section"]) {
      TRIMKV_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0, Config, "'", f.path,
                   "': mrope_section must hold non-negative integers, got ", p["mrope_section"].dump());
      rope.mrope_section.push_back(x.get<int64_t>());
    }
  }
  TRIMKV_CHECK(type == "default" || type == "linear" || type == "llama3", Unsupported, "'", f.path,
               "': rope type '", type, "' is not supported (supported: default, linear, llama3)");
  rope.type = type;
  if (p.contains("factor")) rope.factor = p["factor"].get<double>();
  if (p.contains("low_freq_factor")) rope.low_freq_factor = p["low_freq_factor"].get<double>();
  if (p.contains("high_freq_factor")) rope.high_freq_factor = p["high_freq_factor"].get<double>();
  if (p.contains("original_max_position_embeddings"))
    rope.original_max_position = p["original_max_position_embeddings"].get<int64_t>();
  TRIMKV_CHECK(rope.theta > 0 && rope.factor > 0, Config, "'", f.path,
               "': rope theta and factor must be positive");
}

}  // namespace

std::string checkpoint_model_type(const std::string& dir) {
  if (std::filesystem::is_regular_file(dir)) return gguf_model_type(dir);
  std::ifstream in(std::filesystem::path(dir) / "config.json");
  if (!in.good()) return "";
  const json j = json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string()) return "";
  return j["model_type"].get<std::string>();
}

TextConfig load_text_config(const std::string& config_path) {
  return text_config_from_json(read_json(config_path), config_path);
}

TextConfig text_config_from_json(const json& top, const std::string& config_path) {
  TRIMKV_CHECK(top.is_object(), Config, "'", config_path, "' is not a JSON object");
  static const json kEmpty = json::object();
  const json& text = top.contains("text_config") && top["text_config"].is_object()
                         ? top["text_config"]
                         : kEmpty;
  Fields f{text, top, config_path};
  TextConfig c;
  TextConfigDefaults defaults;
  try {
    if (text.contains("model_type")) c.model_type = text["model_type"].get<std::string>();
    else if (top.contains("model_type")) c.model_type = top["model_type"].get<std::string>();
    TRIMKV_CHECK(!c.model_type.empty(), Config, "'", config_path, "' lacks 'model_type'");
    if (const TextFamily* family = find_text_family_or_null(c.model_type)) defaults = family->defaults;
    c.rope.theta = defaults.rope_theta;
    c.rope.mrope_section = defaults.mrope_section;
    c.rope.mrope_interleaved = defaults.mrope_interleaved;
    c.has_vision_tower = top.contains("vision_config");
    if (top.contains("architectures") && top["architectures"].is_array() &&
        !top["architectures"].empty())
      c.architecture = top["architectures"][0].get<std::string>();
    c.vocab_size = f.required_int("vocab_size");
    c.hidden_size = f.required_int("hidden_size");
    c.intermediate_size = f.required_int("intermediate_size");
    c.n_layer = f.required_int("num_hidden_layers");
    c.n_head = f.required_int("num_attention_heads");
    c.n_kv_head = f.int_or("num_key_value_heads", c.n_head);
    c.head_dim = defaults.head_dim_from_config ? f.int_or("head_dim", c.hidden_size / c.n_head)
                                               : c.hidden_size / c.n_head;
    c.rms_norm_eps = f.double_or("rms_norm_eps", defaults.rms_norm_eps);
    c.max_position_embeddings = f.int_or("max_position_embeddings", defaults.max_position_embeddings);
    if (const json* v = f.get("tie_word_embeddings")) c.tie_word_embeddings = v->get<bool>();
    if (top.contains("tie_word_embeddings") && top["tie_word_embeddings"].is_boolean())
      c.tie_word_embeddings = top["tie_word_embeddings"].get<bool>();
    if (const json* v = f.get("attention_bias")) c.attention_bias = v->get<bool>();
    if (const json* v = f.get("hidden_act")) c.hidden_act = v->get<std::string>();
    if (const json* v = f.get("eos_token_id")) c.eos_token_ids = ids_of(*v, config_path, "eos_token_id");
    if (const json* v = f.get("bos_token_id"); v && v->is_number_integer()) c.bos_token_id = v->get<int32_t>();
    if (const json* v = f.get("torch_dtype"); v && v->is_string()) c.torch_dtype = v->get<std::string>();
    if (const json* v = f.get("dtype"); v && v->is_string()) c.torch_dtype = v->get<std::string>();
    parse_rope(f, c.rope);
  } catch (const json::exception& e) {
    TRIMKV_FAIL(Config, "'", config_path, "': a field has the wrong type: ", e.what());
  }
  TRIMKV_CHECK(c.n_kv_head > 0 && c.n_head % c.n_kv_head == 0, Config, "'", config_path,
               "': num_attention_heads (", c.n_head, ") must be a multiple of num_key_value_heads (",
               c.n_kv_head, ")");
  TRIMKV_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, Config, "'", config_path,
               "': head_dim must be even and positive, got ", c.head_dim);
  if (c.rope.multimodal()) {
    int64_t sum = 0;
    std::string list;
    for (int64_t s : c.rope.mrope_section) {
      sum += s;
      list += (list.empty() ? "" : ", ") + std::to_string(s);
    }
    TRIMKV_CHECK(sum == c.head_dim / 2, Config, "'", config_path, "': mrope_section [", list, "] sums to ", sum,
                 " but must sum to head_dim / 2 = ", c.head_dim / 2, " (one section per rotary frequency)");
    TRIMKV_CHECK(c.rope.mrope_section.size() == 3, Config, "'", config_path, "': mrope_section [", list,
                 "] must have three sections (time, height, width)");
  }
  TRIMKV_CHECK(c.hidden_act == "silu", Unsupported, "'", config_path, "': hidden_act '",
               c.hidden_act, "' is not supported by the text decoder (silu only)");
  return c;
}

bool merge_generation_config(const std::string& path, TextConfig& cfg) {
  if (!std::filesystem::exists(path)) return false;
  const json j = read_json(path);
  if (j.contains("eos_token_id")) {
    auto ids = ids_of(j["eos_token_id"], path, "eos_token_id");
    if (!ids.empty()) cfg.eos_token_ids = ids;
  }
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    cfg.bos_token_id = j["bos_token_id"].get<int32_t>();
  return true;
}

}  // namespace trimkv
