#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"

namespace trimkv {
namespace {

// The single-sequence template as a list of parts: the sequence itself or special-token ids.
class TemplatePostProcessor final : public PostProcessor {
 public:
  struct Part {
    bool is_sequence;
    std::vector<int32_t> ids;  // the special token's ids when !is_sequence
  };
  explicit TemplatePostProcessor(std::vector<Part> parts) : m_parts(std::move(parts)) {}

  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const auto& part : m_parts) {
      if (part.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), part.ids.begin(), part.ids.end());
    }
    ids = std::move(out);
  }

 private:
  std::vector<Part> m_parts;
};

class NoOpPostProcessor final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&, bool) const override {}
};

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : m_steps(std::move(steps)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& step : m_steps) step->process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> m_steps;
};

std::unique_ptr<PostProcessor> make_template(const nlohmann::json& spec, const std::string& file) {
  const auto& special_tokens = spec.contains("special_tokens") ? spec.at("special_tokens") : nlohmann::json::object();
  std::vector<TemplatePostProcessor::Part> parts;
  for (const auto& piece : spec.at("single")) {
    if (piece.contains("Sequence")) {
      const std::string which = piece.at("Sequence").at("id").get<std::string>();
      TRIMKV_CHECK(which == "A", Format, file, ": the single template may only use sequence A, not ", which);
      parts.push_back({true, {}});
    } else {
      TRIMKV_CHECK(piece.contains("SpecialToken"), Format, file,
                   ": template pieces must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
      TRIMKV_CHECK(special_tokens.contains(name), Format, file, ": template token '", name,
                   "' is missing from post_processor.special_tokens");
      parts.push_back({false, special_tokens.at(name).at("ids").get<std::vector<int32_t>>()});
    }
  }
  return std::make_unique<TemplatePostProcessor>(std::move(parts));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& spec, const std::string& file) {
  if (spec.is_null()) return nullptr;
  TRIMKV_CHECK(spec.is_object() && spec.contains("type"), Format, file,
               ": post_processor must be an object with a \"type\"");
  const std::string type = spec.at("type").get<std::string>();
  if (type == "TemplateProcessing") return make_template(spec, file);
  if (type == "ByteLevel") return std::make_unique<NoOpPostProcessor>();
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // "cls": [token, id], "sep": [token, id]; a single sequence becomes cls A sep.
    const int32_t cls = spec.at("cls").at(1).get<int32_t>(), sep = spec.at("sep").at(1).get<int32_t>();
    return std::make_unique<TemplatePostProcessor>(std::vector<TemplatePostProcessor::Part>{
        {false, {cls}}, {true, {}}, {false, {sep}}});
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const auto& sub : spec.at("processors")) {
      auto step = make_post_processor(sub, file);
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePostProcessor>(std::move(steps));
  }
  TRIMKV_FAIL(Unsupported, file, ": unsupported post_processor type '", type, "'");
}

}  // namespace trimkv
