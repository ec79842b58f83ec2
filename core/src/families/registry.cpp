#include "trimkv/core/error.h"
#include "trimkv/core/text_family.h"

namespace trimkv {

namespace {
const std::vector<const TextFamily*>& all_families() {
  static const std::vector<const TextFamily*> kAll{&llama_family(), &qwen2_family(), &qwen3_family(),
                                                   &qwen2_vl_text_family(), &qwen3_vl_text_family()};
  return kAll;
}
}  // namespace

std::vector<std::string> supported_text_model_types() {
  std::vector<std::string> out;
  for (const TextFamily* f : all_families())
    out.insert(out.end(), f->model_types.begin(), f->model_types.end());
  return out;
}

const TextFamily* find_text_family_or_null(const std::string& model_type) {
  for (const TextFamily* f : all_families())
    for (const auto& t : f->model_types)
      if (t == model_type) return f;
  return nullptr;
}

const TextFamily& find_text_family(const std::string& model_type, const std::string& config_path) {
  if (const TextFamily* f = find_text_family_or_null(model_type)) return *f;
  std::string known;
  for (const auto& t : supported_text_model_types()) known += (known.empty() ? "" : ", ") + t;
  TRIMKV_FAIL(Unsupported, "unknown architecture: model_type '", model_type, "' in '", config_path,
              "' (supported text decoders: ", known, ")");
}

}  // namespace trimkv
