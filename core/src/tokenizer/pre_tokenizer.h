// tokenizer.json "pre_tokenizer": ByteLevel, Split, Digits and Sequence, with the splitting
// semantics of the Rust `tokenizers` crate (NormalizedString::split and its behaviours).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trimkv {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces, in order; empty pieces are dropped (as HF does).
  // Precondition: every piece is non-empty valid UTF-8.
  virtual void pre_tokenize(std::vector<std::string>& pieces) const = 0;
};

// nullptr for a JSON null. Throws Error Unsupported naming `file` and the type for any other
// pre-tokenizer, Format for a malformed entry or an invalid regex.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& file);

// --- splitting, exposed for tests of the behaviours ---

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// A run of text and whether the pattern matched it. Spans are contiguous and cover the text.
struct SplitSpan {
  size_t begin, end;
  bool is_match;
};

// Turns matches into covering spans (gaps become non-matches), like HF Pattern::find_matches.
std::vector<SplitSpan> spans_from_matches(const std::vector<std::pair<size_t, size_t>>& matches,
                                          size_t text_size);
// Appends the pieces of `text` that `behavior` makes of `spans` to out, skipping empty ones.
void split_by_behavior(std::string_view text, std::vector<SplitSpan> spans, SplitBehavior behavior,
                       std::vector<std::string>& out);

}  // namespace trimkv
