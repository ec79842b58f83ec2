#include "trimkv/core/bpe_trainer.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"
#include "trimkv/core/atomic_write.h"
#include "trimkv/core/error.h"

namespace trimkv {
namespace {

constexpr const char* kSource = "<bpe trainer>";  // the "file" named by errors of the shared parsers

// The pre-tokenizer written to the file and used to count words: SmolLM2's.
nlohmann::ordered_json pre_tokenizer_spec() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Digits"}, {"individual_digits", true}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}};
}

nlohmann::ordered_json added_tokens_json(const std::vector<std::string>& specials) {
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < specials.size(); ++i)
    added.push_back({{"id", static_cast<int32_t>(i)},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  return added;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

std::vector<std::string> default_special_tokens() {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<end_of_utterance>",
                                     "<fake_token_around_image>", "<image>", "<global-img>"};
  for (int r = 1; r <= 6; ++r)
    for (int c = 1; c <= 6; ++c) tokens.push_back("<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">");
  return tokens;
}

struct BpeTrainer::Impl {
  BpeTrainerOptions options;
  AddedVocabulary specials;                     // cuts special tokens out of the texts
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // the one written to the file
  std::map<std::string, int64_t> word_counts;   // raw bytes of a word -> occurrences (ordered)
  int64_t n_texts = 0;
};

BpeTrainer::BpeTrainer(BpeTrainerOptions options) : m_impl(std::make_unique<Impl>()) {
  const int64_t n_special = static_cast<int64_t>(options.special_tokens.size());
  TRIMKV_CHECK(options.vocab_size >= n_special + 256, Input, "vocab size ", options.vocab_size,
               " is too small: it must be at least ", n_special + 256, " (", n_special,
               " special tokens + 256 byte tokens)");
  TRIMKV_CHECK(options.min_frequency >= 1, Input, "min frequency ", options.min_frequency, " must be at least 1");
  std::set<std::string> seen;
  for (const auto& token : options.special_tokens) {
    TRIMKV_CHECK(!token.empty(), Input, "a special token is empty");
    TRIMKV_CHECK(utf8::is_valid(token), Input, "special token '", token, "' is not valid UTF-8");
    TRIMKV_CHECK(seen.insert(token).second, Input, "special token '", token, "' is listed twice");
  }
  m_impl->specials = AddedVocabulary(nlohmann::json::parse(added_tokens_json(options.special_tokens).dump()), nullptr, kSource);
  m_impl->pre_tokenizer = make_pre_tokenizer(nlohmann::json::parse(pre_tokenizer_spec().dump()), kSource);
  m_impl->options = std::move(options);
}

BpeTrainer::~BpeTrainer() = default;
BpeTrainer::BpeTrainer(BpeTrainer&&) noexcept = default;
BpeTrainer& BpeTrainer::operator=(BpeTrainer&&) noexcept = default;

int64_t BpeTrainer::n_texts() const { return m_impl->n_texts; }
int64_t BpeTrainer::n_distinct_words() const { return static_cast<int64_t>(m_impl->word_counts.size()); }

void BpeTrainer::add_text(std::string_view text) {
  TRIMKV_CHECK(utf8::is_valid(text), Input, "training text ", m_impl->n_texts + 1, " is not valid UTF-8");
  ++m_impl->n_texts;
  std::vector<std::string> pieces;
  for (TextPiece& piece : m_impl->specials.extract_and_normalize(text, nullptr))
    if (piece.id < 0 && !piece.text.empty()) pieces.push_back(std::move(piece.text));
  if (pieces.empty()) return;
  m_impl->pre_tokenizer->pre_tokenize(pieces);
  for (const std::string& word : pieces) {
    std::string bytes;
    const bool ok = byte_level::decode(word, bytes);
    TRIMKV_ASSERT(ok, "a pre-tokenized word is not byte-level text");
    ++m_impl->word_counts[bytes];
  }
}

BpeTrainResult BpeTrainer::train() const {
  const Impl& st = *m_impl;
  TRIMKV_CHECK(!st.word_counts.empty(), Input, "no training text (", st.n_texts,
               " texts added, none with text outside special tokens)");
  const auto& specials = st.options.special_tokens;
  const int32_t n_special = static_cast<int32_t>(specials.size());

  // Tokens by id: their raw bytes (what ties compare) and their byte-level strings.
  std::vector<std::string> bytes_of;
  std::unordered_map<std::string, int32_t> id_of_bytes;
  for (const auto& s : specials) {
    id_of_bytes.emplace(s, static_cast<int32_t>(bytes_of.size()));
    bytes_of.push_back(s);
  }
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, static_cast<char>(b));
    id_of_bytes.emplace(one, static_cast<int32_t>(bytes_of.size()));
    bytes_of.push_back(one);
  }

  // HF's id of a token, for BpeTieBreak::hf_token_ids: ours for specials and merges (both layouts
  // append merges in creation order); the byte tokens ranked by their stand-in characters' code
  // points (their UTF-8 strings compare the same way).
  const bool hf_ties = st.options.tie_break == BpeTieBreak::hf_token_ids;
  std::array<int32_t, 256> byte_rank{};
  if (hf_ties) {
    std::vector<std::pair<std::string, int32_t>> stand_ins;
    for (int32_t b = 0; b < 256; ++b) stand_ins.emplace_back(byte_level::encode(std::string(1, static_cast<char>(b))), b);
    std::sort(stand_ins.begin(), stand_ins.end());
    for (int32_t i = 0; i < 256; ++i) byte_rank[stand_ins[i].second] = i;
  }
  const auto hf_id = [&byte_rank, n_special](int32_t t) {
    return t >= n_special && t < n_special + 256 ? n_special + byte_rank[t - n_special] : t;
  };

  struct Word {
    std::vector<int32_t> symbols;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [bytes, count] : st.word_counts) {
    Word w{{}, count};
    for (const char c : bytes) w.symbols.push_back(n_special + static_cast<unsigned char>(c));
    words.push_back(std::move(w));
  }

  // Pair counts (over word occurrences), the words holding each pair (may list a word twice or
  // after it lost the pair: checked when used), and a max-heap of (count, pair) whose stale
  // entries (count no longer current) are skipped when popped.
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;
  struct Entry {
    int64_t count;
    int32_t a, b;
  };
  auto lower_priority = [&bytes_of, &hf_id, hf_ties](const Entry& x, const Entry& y) {
    if (x.count != y.count) return x.count < y.count;
    if (hf_ties) return std::make_pair(hf_id(x.a), hf_id(x.b)) > std::make_pair(hf_id(y.a), hf_id(y.b));
    const int left = bytes_of[x.a].compare(bytes_of[y.a]);
    if (left != 0) return left > 0;  // the smaller (left, right) bytes win ties
    return bytes_of[x.b].compare(bytes_of[y.b]) > 0;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(lower_priority)> heap(lower_priority);

  for (int32_t w = 0; w < static_cast<int32_t>(words.size()); ++w) {
    const auto& sym = words[w].symbols;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      const uint64_t key = pair_key(sym[i], sym[i + 1]);
      pair_count[key] += words[w].count;
      pair_words[key].push_back(w);
    }
  }
  for (const auto& [key, count] : pair_count)
    heap.push({count, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xffffffffu)});

  BpeTrainResult result;
  result.n_special = n_special;
  std::vector<int32_t> visited(words.size(), -1);  // merge number that last rewrote the word
  int32_t n_tokens = static_cast<int32_t>(bytes_of.size());
  for (int32_t merge = 0; n_tokens < st.options.vocab_size; ++merge) {
    // The best current pair.
    Entry best{0, -1, -1};
    while (!heap.empty()) {
      const Entry top = heap.top();
      heap.pop();
      const auto it = pair_count.find(pair_key(top.a, top.b));
      if (it != pair_count.end() && it->second == top.count) {
        best = top;
        break;
      }
    }
    if (best.a < 0 || best.count < st.options.min_frequency) break;

    const std::string merged = bytes_of[best.a] + bytes_of[best.b];
    int32_t new_id;
    if (const auto found = id_of_bytes.find(merged); found != id_of_bytes.end()) {
      new_id = found->second;
    } else {
      new_id = static_cast<int32_t>(bytes_of.size());
      bytes_of.push_back(merged);
      id_of_bytes.emplace(merged, new_id);
      ++n_tokens;
    }
    result.merges.emplace_back(byte_level::encode(bytes_of[best.a]), byte_level::encode(bytes_of[best.b]));

    // Rewrite every word holding the pair: take its pairs out, merge left to right, put the
    // new pairs in; then refresh the heap for every pair whose count changed.
    const uint64_t best_key = pair_key(best.a, best.b);
    std::vector<int32_t> holders = std::move(pair_words[best_key]);
    pair_words.erase(best_key);
    std::set<uint64_t> changed;
    for (const int32_t w : holders) {
      if (visited[w] == merge) continue;
      visited[w] = merge;
      Word& word = words[w];
      auto& sym = word.symbols;
      bool has = false;
      for (size_t i = 0; i + 1 < sym.size() && !has; ++i) has = sym[i] == best.a && sym[i + 1] == best.b;
      if (!has) continue;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        const uint64_t key = pair_key(sym[i], sym[i + 1]);
        pair_count[key] -= word.count;
        changed.insert(key);
      }
      std::vector<int32_t> out;
      out.reserve(sym.size());
      for (size_t i = 0; i < sym.size(); ++i) {
        if (i + 1 < sym.size() && sym[i] == best.a && sym[i + 1] == best.b) {
          out.push_back(new_id);
          ++i;
        } else {
          out.push_back(sym[i]);
        }
      }
      sym = std::move(out);
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        const uint64_t key = pair_key(sym[i], sym[i + 1]);
        pair_count[key] += word.count;
        changed.insert(key);
        if (sym[i] == new_id || sym[i + 1] == new_id) pair_words[key].push_back(w);
      }
    }
    for (const uint64_t key : changed) {
      const auto it = pair_count.find(key);
      if (it->second <= 0) {
        pair_count.erase(it);
        continue;
      }
      heap.push({it->second, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xffffffffu)});
    }
  }

  // The file.
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_of.size()); ++id)
    result.vocab.push_back(id < n_special ? bytes_of[id] : byte_level::encode(bytes_of[id]));
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int32_t id = 0; id < static_cast<int32_t>(result.vocab.size()); ++id) vocab[result.vocab[id]] = id;
  TRIMKV_ASSERT(vocab.size() == result.vocab.size(), "two tokens share a string");
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : result.merges) merges.push_back({a, b});
  const nlohmann::ordered_json file = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added_tokens_json(specials)},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer_spec()},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  result.tokenizer_json = file.dump(2) + "\n";
  return result;
}

void save_tokenizer_json(const BpeTrainResult& result, const std::string& path) {
  write_file_atomic(path, result.tokenizer_json);
}

}  // namespace trimkv
