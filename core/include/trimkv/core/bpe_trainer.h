// Byte-level BPE training: the project's own trainer for the demo model's tokenizer (issue 6),
// written out as a Hugging Face tokenizer.json that trimkv::Tokenizer and the `tokenizers`
// library both load and encode identically.
//
// The file: special tokens first (ids 0..n_special-1, in model.vocab and in added_tokens with
// special = true, normalized = false), then the 256 byte tokens in byte order (GPT-2 stand-in
// characters), then one token per merge in the order learnt. Pre-tokenizer: SmolLM2's
// Sequence[Digits(individual_digits), ByteLevel(add_prefix_space = false)]; decoder ByteLevel;
// no normalizer or post-processor (nothing is added to an encoding).
//
// Training (the classic BPE loop, as HF's BpeTrainer): the texts are cut at special tokens,
// pre-tokenized exactly as encoding will, and counted by word; then, repeatedly, the most
// frequent adjacent pair of tokens over all words is merged into a new token, until the
// vocabulary holds vocab_size tokens or no pair occurs min_frequency times (the vocabulary is
// then smaller than asked). Ties between pairs of equal count go to the pair whose
// (left bytes, right bytes) is lexicographically smallest (byte-wise), so the result depends
// only on the multiset of texts and the options, never on hash order: the same input gives a
// byte-identical file. A merge whose string is already a token (e.g. "ab"+"c" after
// "a"+"bc") reuses that token's id, as HF does.
//
// HF breaks ties by token ids instead, in its own layout: specials, then the 256 byte-level
// characters in code-point order (printable bytes first, so the space "Ġ" comes after "~"),
// then merges in creation order. The orders differ only on ties, and ties are everywhere in
// templated text (every pair of a word that only ever occurs whole, like "Assistant", has the
// same count), so BpeTieBreak::hf_token_ids exists for the oracle test that compares every
// merge with HF's trainer (tests/core/test_bpe_trainer.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trimkv {

// The demo VLM's special tokens, in id order: "<|endoftext|>", "<|im_start|>", "<|im_end|>"
// (SmolLM2's first three), "<end_of_utterance>", "<fake_token_around_image>", "<image>",
// "<global-img>", then "<row_{r}_col_{c}>" for r, c in 1..6 (SmolVLM's image expansion).
std::vector<std::string> default_special_tokens();

// How pairs of equal count are ordered (see the file comment).
enum class BpeTieBreak {
  bytes,          // the smaller (left bytes, right bytes) first: what the project trains with
  hf_token_ids,   // the smaller (left id, right id) in HF's BpeTrainer layout first
};

struct BpeTrainerOptions {
  int32_t vocab_size = 1024;  // specials + 256 bytes + merges
  int64_t min_frequency = 2;  // a pair seen fewer times (counting word frequencies) is not merged
  std::vector<std::string> special_tokens = default_special_tokens();
  BpeTieBreak tie_break = BpeTieBreak::bytes;  // the file's layout is the same either way
};

struct BpeTrainResult {
  std::vector<std::string> vocab;  // [n_tokens] token string (byte-level characters) of each id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  int32_t n_special = 0;
  std::string tokenizer_json;      // the tokenizer.json text (deterministic, 2-space indent)
};

class BpeTrainer {
 public:
  // Error{Input} when vocab_size < n_special + 256 (naming both), min_frequency < 1, or a special
  // token is empty or repeated.
  explicit BpeTrainer(BpeTrainerOptions options);
  ~BpeTrainer();
  BpeTrainer(BpeTrainer&&) noexcept;
  BpeTrainer& operator=(BpeTrainer&&) noexcept;

  // Adds one text (UTF-8; Error{Input} otherwise): special tokens are cut out, the rest is
  // pre-tokenized and its words counted.
  void add_text(std::string_view text);

  int64_t n_texts() const;
  int64_t n_distinct_words() const;

  // Learns the merges. Error{Input} when no text (or only special tokens) was added.
  BpeTrainResult train() const;

 private:
  struct Impl;  // options, the special-token splitter, the pre-tokenizer and the word counts
  std::unique_ptr<Impl> m_impl;
};

// Writes result.tokenizer_json to `path`. Error{Io} naming the file.
void save_tokenizer_json(const BpeTrainResult& result, const std::string& path);

}  // namespace trimkv
