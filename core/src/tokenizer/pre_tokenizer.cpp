#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"
#include "trimkv/core/error.h"

namespace trimkv {

std::vector<SplitSpan> spans_from_matches(const std::vector<std::pair<size_t, size_t>>& matches,
                                          size_t text_size) {
  std::vector<SplitSpan> spans;
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) spans.push_back({prev, begin, false});
    spans.push_back({begin, end, true});
    prev = end;
  }
  if (prev != text_size) spans.push_back({prev, text_size, false});
  return spans;
}

void split_by_behavior(std::string_view text, std::vector<SplitSpan> spans, SplitBehavior behavior,
                       std::vector<std::string>& out) {
  // Mirrors NormalizedString::split: spans are first grouped, then sliced.
  std::vector<std::pair<size_t, size_t>> pieces;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const auto& s : spans)
        if (!s.is_match) pieces.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::Isolated:
      for (const auto& s : spans) pieces.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::Contiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !pieces.empty()) pieces.back().second = s.end;
        else pieces.emplace_back(s.begin, s.end);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !pieces.empty()) pieces.back().second = s.end;
        else pieces.emplace_back(s.begin, s.end);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) pieces.back().first = it->begin;
        else pieces.emplace_back(it->begin, it->end);
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
  }
  for (const auto& [begin, end] : pieces)
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
}

namespace {

// Applies `split_one` (text -> sub-pieces appended to out) to every piece.
template <typename F>
void split_each(std::vector<std::string>& pieces, F&& split_one) {
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto& piece : pieces) split_one(piece, out);
  pieces = std::move(out);
}

// The GPT-2 pattern of HF's ByteLevel pre-tokenizer.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits with the GPT-2 regex (optional), then maps bytes to their stand-in characters. With
// add_prefix_space a space is prepended to every piece not starting with one (HF does this
// per piece, i.e. also after added tokens and earlier splits).
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : m_add_prefix_space(add_prefix_space), m_use_regex(use_regex) {}

  void pre_tokenize(std::vector<std::string>& pieces) const override {
    static const Regex kGpt2(kGpt2Pattern, "ByteLevel pre-tokenizer");
    split_each(pieces, [&](const std::string& piece, std::vector<std::string>& out) {
      std::string text = piece;
      if (m_add_prefix_space && text[0] != ' ') text.insert(text.begin(), ' ');
      if (!m_use_regex) {
        out.push_back(byte_level::encode(text));
        return;
      }
      std::vector<std::string> parts;
      split_by_behavior(text, spans_from_matches(kGpt2.find_all(text), text.size()),
                        SplitBehavior::Isolated, parts);
      for (const auto& part : parts) out.push_back(byte_level::encode(part));
    });
  }

 private:
  bool m_add_prefix_space, m_use_regex;
};

// Split on a regex or a literal string (compiled as an escaped regex, like HF).
class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, SplitBehavior behavior, bool invert)
      : m_regex(std::move(regex)), m_behavior(behavior), m_invert(invert) {}

  void pre_tokenize(std::vector<std::string>& pieces) const override {
    split_each(pieces, [&](const std::string& piece, std::vector<std::string>& out) {
      auto spans = spans_from_matches(m_regex->find_all(piece), piece.size());
      if (m_invert)
        for (auto& s : spans) s.is_match = !s.is_match;
      split_by_behavior(piece, std::move(spans), m_behavior, out);
    });
  }

 private:
  std::unique_ptr<Regex> m_regex;
  SplitBehavior m_behavior;
  bool m_invert;
};

// Numeric characters (Rust char::is_numeric) become pieces of their own (individual_digits)
// or runs of digits (Contiguous).
class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual_digits) : m_individual(individual_digits) {}

  void pre_tokenize(std::vector<std::string>& pieces) const override {
    split_each(pieces, [&](const std::string& piece, std::vector<std::string>& out) {
      std::vector<std::pair<size_t, size_t>> matches;
      size_t i = 0;
      while (i < piece.size()) {
        const size_t begin = i;
        if (utf8::is_numeric(utf8::next(piece, i))) matches.emplace_back(begin, i);
      }
      split_by_behavior(piece, spans_from_matches(matches, piece.size()),
                        m_individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous, out);
    });
  }

 private:
  bool m_individual;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : m_steps(std::move(steps)) {}
  void pre_tokenize(std::vector<std::string>& pieces) const override {
    for (const auto& step : m_steps) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> m_steps;
};

SplitBehavior parse_behavior(const std::string& name, const std::string& file) {
  std::string lower;
  for (const char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "removed") return SplitBehavior::Removed;
  if (lower == "isolated") return SplitBehavior::Isolated;
  if (lower == "mergedwithprevious" || lower == "merged_with_previous") return SplitBehavior::MergedWithPrevious;
  if (lower == "mergedwithnext" || lower == "merged_with_next") return SplitBehavior::MergedWithNext;
  if (lower == "contiguous") return SplitBehavior::Contiguous;
  TRIMKV_FAIL(Format, file, ": unknown Split behavior '", name, "'");
}

bool flag(const nlohmann::json& spec, const char* key, bool fallback) {
  const auto it = spec.find(key);
  return it == spec.end() || it->is_null() ? fallback : it->get<bool>();
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& file) {
  if (spec.is_null()) return nullptr;
  TRIMKV_CHECK(spec.is_object() && spec.contains("type"), Format, file,
               ": pre_tokenizer must be an object with a \"type\"");
  const std::string type = spec.at("type").get<std::string>();
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(flag(spec, "add_prefix_space", true),
                                                   flag(spec, "use_regex", true));
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(flag(spec, "individual_digits", false));
  if (type == "Split") {
    const auto& pattern = spec.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern.at("Regex").get<std::string>();
    } else {
      TRIMKV_CHECK(pattern.contains("String"), Format, file,
                   ": Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
      regex = Regex::escape(pattern.at("String").get<std::string>());
    }
    return std::make_unique<SplitPreTokenizer>(std::make_unique<Regex>(regex, file),
                                               parse_behavior(spec.at("behavior").get<std::string>(), file),
                                               flag(spec, "invert", false));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& sub : spec.at("pretokenizers")) {
      auto step = make_pre_tokenizer(sub, file);
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  TRIMKV_FAIL(Unsupported, file, ": unsupported pre_tokenizer type '", type, "'");
}

}  // namespace trimkv
