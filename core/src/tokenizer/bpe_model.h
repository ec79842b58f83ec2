// tokenizer.json "model" of type BPE: vocabulary, ranked merges, and the word -> ids merge loop
// of the Rust `tokenizers` crate (lowest rank first, leftmost on ties).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trimkv {

class BpeModel {
 public:
  // Reads model.vocab and model.merges ("a b" strings or ["a", "b"] pairs) and the options
  // unk_token, fuse_unk, byte_fallback, ignore_merges, continuing_subword_prefix,
  // end_of_word_suffix. dropout is a training-time regulariser and is ignored (deterministic
  // encoding, as with dropout 0). Throws Error Format naming `file` for a malformed model or a
  // merge whose parts are not in the vocabulary.
  BpeModel(const nlohmann::json& model, const std::string& file);

  // Appends the ids of one pre-tokenized word. Characters with no token and no unk_token /
  // byte fallback are dropped, as HF does. Thread-safe.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  const std::string* id_to_token(int32_t id) const;   // nullptr if absent
  int32_t max_id() const { return static_cast<int32_t>(m_id_to_token.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;    // position in the merges list: lower merges first
    int32_t new_id;  // id of the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::vector<int32_t> merge_word(std::string_view word) const;

  std::unordered_map<std::string, int32_t> m_vocab;
  std::vector<std::string> m_id_to_token;  // [max_id + 1]; "" where m_has_id is false
  std::vector<bool> m_has_id;              // [max_id + 1]
  std::unordered_map<uint64_t, Merge> m_merges;  // (left id, right id) -> merge
  int32_t m_unk_id = -1;
  bool m_fuse_unk = false, m_byte_fallback = false, m_ignore_merges = false;
  std::string m_prefix, m_suffix;  // continuing_subword_prefix, end_of_word_suffix

  // Word -> ids, like HF's cache: words shorter than kMaxCachedWord bytes, at most
  // kCacheCapacity entries (later words are simply not cached). Guarded by m_cache_mutex.
  static constexpr size_t kMaxCachedWord = 256;
  static constexpr size_t kCacheCapacity = 10000;
  mutable std::mutex m_cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> m_cache;
};

}  // namespace trimkv
