// tokenizer.json "post_processor": what encode(add_special_tokens = true) wraps around the ids.
// TemplateProcessing (single template), RobertaProcessing / BertProcessing (cls A sep),
// ByteLevel (offsets only: adds nothing), Sequence of those.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trimkv {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites the ids of a single sequence. With add_special_tokens false nothing is added.
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
};

// nullptr for a JSON null. Throws Error Unsupported naming `file` and the type for any other
// post-processor, Format for a malformed one.
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& spec, const std::string& file);

}  // namespace trimkv
