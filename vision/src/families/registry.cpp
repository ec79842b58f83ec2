#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"
#include "trimkv/core/text_family.h"
#include "trimkv/vision/vlm.h"

namespace trimkv::vision {

namespace {
const std::vector<const VlmFamily*>& all_families() {
  static const std::vector<const VlmFamily*> kAll{&idefics3_family(), &qwen2_vl_family(), &qwen3_vl_family()};
  return kAll;
}
const VlmFamily* find_family(const std::string& model_type) {
  for (const VlmFamily* f : all_families())
    for (const auto& t : f->model_types)
      if (t == model_type) return f;
  return nullptr;
}
}  // namespace

std::vector<std::string> supported_vlm_model_types() {
  std::vector<std::string> out;
  for (const VlmFamily* f : all_families()) out.insert(out.end(), f->model_types.begin(), f->model_types.end());
  return out;
}

std::string family_for_model_type(const std::string& model_type) {
  if (const VlmFamily* f = find_family(model_type)) return f->name;
  if (const TextFamily* t = find_text_family_or_null(model_type)) return t->name;
  return "";
}

bool is_vlm_checkpoint(const std::string& dir) { return find_family(checkpoint_model_type(dir)) != nullptr; }

std::shared_ptr<VlmModel> load_vlm(const std::string& dir, const std::vector<TemplateVar>& template_vars,
                                   const ModelLoadOptions& options) {
  TRIMKV_CHECK(std::filesystem::is_directory(dir), Io, "model folder '", dir, "' does not exist");
  const std::string type = checkpoint_model_type(dir);
  const VlmFamily* f = find_family(type);
  if (!f) {
    std::string known;
    for (const auto& t : supported_vlm_model_types()) known += (known.empty() ? "" : ", ") + t;
    TRIMKV_FAIL(Unsupported, "'", dir, "' is not a vision-language checkpoint this program knows: model_type '",
                type, "' (supported: ", known, ")");
  }
  return f->load(dir, template_vars, options);
}

}  // namespace trimkv::vision
