// tokenizer.json "added_tokens": special and extra tokens that are cut out of the text before
// the model sees it, with the matching rules of the Rust `tokenizers` crate (AddedVocabulary).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trimkv {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;  // only match when not inside a word (regex \w on both sides)
  bool lstrip = false;       // absorb the whitespace before the match
  bool rstrip = false;       // absorb the whitespace after the match
  bool normalized = true;    // matched on normalized text (see AddedVocabulary)
  bool special = false;      // dropped by decode(skip_special_tokens)
  // What id_to_token and decode see: content, normalized when `normalized` is set (HF keeps
  // the normalized form in its id -> token map; token_to_id still takes the raw content).
  std::string token_string;
};

// A piece of the input: either an added token (id >= 0; text is what it absorbed) or text
// still to be tokenized by the model (id == -1).
struct TextPiece {
  std::string text;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // Throws Error Format naming `file` for a malformed entry. `normalizer` (may be null) gives
  // the matched form of tokens with normalized == true; it is not kept.
  AddedVocabulary(const nlohmann::json& added_tokens, const Normalizer* normalizer, const std::string& file);

  // HF extract_and_normalize: (1) cut out tokens with normalized == false from the raw text;
  // (2) normalize each remaining text piece and cut out tokens with normalized == true from the
  // normalized text. Returned text pieces are normalized; empty pieces are dropped.
  // Matching is leftmost, longest among matches starting at the same byte, non-overlapping.
  std::vector<TextPiece> extract_and_normalize(std::string_view text, const Normalizer* normalizer) const;

  const AddedToken* find(int32_t id) const;         // nullptr if id is not an added token
  int32_t token_to_id(std::string_view content) const;  // -1 if absent
  int32_t max_id() const { return m_max_id; }

 private:
  // Leftmost-longest multi-pattern matcher over bytes (the aho-corasick MatchKind::LeftmostLongest
  // semantics): candidates bucketed by first byte, longest first.
  class Matcher {
   public:
    void add(std::string pattern, size_t token_index);
    void finish();  // sorts buckets; call once after the last add
    bool empty() const { return m_n_patterns == 0; }
    // Non-overlapping leftmost-longest matches: [begin, end) and the index of the token.
    struct Match {
      size_t begin, end;
      size_t token_index;
    };
    std::vector<Match> find_all(std::string_view text) const;

   private:
    std::vector<std::pair<std::string, size_t>> m_buckets[256];  // by first byte: (pattern, token index)
    size_t m_n_patterns = 0;
  };

  // HF find_matches + split_with_indices for one piece: applies single_word / lstrip / rstrip.
  void split_piece(std::string_view text, const Matcher& matcher, std::vector<TextPiece>& out) const;

  std::vector<AddedToken> m_tokens;  // file order; matchers refer to tokens by index
  std::unordered_map<int32_t, size_t> m_by_id;
  std::unordered_map<std::string, int32_t> m_by_content;
  Matcher m_raw_matcher;         // tokens with normalized == false, on raw text
  Matcher m_normalized_matcher;  // tokens with normalized == true, on normalized text
  int32_t m_max_id = -1;
};

}  // namespace trimkv
