#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include <nlohmann/json.hpp>

#include "tokenizer/utf8.h"
#include "trimkv/core/error.h"

namespace trimkv {

BpeModel::BpeModel(const nlohmann::json& model, const std::string& file) {
  TRIMKV_CHECK(model.contains("vocab") && model.at("vocab").is_object(), Format, file,
               ": model.vocab must be an object {token: id}");
  int32_t max_id = -1;
  for (const auto& [token, id_json] : model.at("vocab").items()) {
    TRIMKV_CHECK(id_json.is_number_integer(), Format, file, ": vocab id of token '", token, "' is ", id_json.dump(),
                 ", not an integer");
    const int64_t id = id_json.get<int64_t>();
    TRIMKV_CHECK(id >= 0 && id < (int64_t{1} << 31) - 1, Format, file, ": vocab id ", id,
                 " of token '", token, "' is out of range");
    m_vocab[token] = static_cast<int32_t>(id);
    if (id > max_id) max_id = static_cast<int32_t>(id);
  }
  m_id_to_token.resize(static_cast<size_t>(max_id + 1));
  m_has_id.resize(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : m_vocab) {
    TRIMKV_CHECK(!m_has_id[id], Format, file, ": vocab gives id ", id, " to two tokens, '", m_id_to_token[id],
                 "' and '", token, "'");
    m_id_to_token[id] = token;
    m_has_id[id] = true;
  }

  auto string_option = [&](const char* key) {
    const auto it = model.find(key);
    return it == model.end() || it->is_null() ? std::string() : it->get<std::string>();
  };
  auto bool_option = [&](const char* key) {
    const auto it = model.find(key);
    return it != model.end() && !it->is_null() && it->get<bool>();
  };
  m_prefix = string_option("continuing_subword_prefix");
  m_suffix = string_option("end_of_word_suffix");
  m_fuse_unk = bool_option("fuse_unk");
  m_byte_fallback = bool_option("byte_fallback");
  m_ignore_merges = bool_option("ignore_merges");
  const std::string unk = string_option("unk_token");
  if (!unk.empty()) {
    m_unk_id = token_to_id(unk);
    TRIMKV_CHECK(m_unk_id >= 0, Format, file, ": model.unk_token '", unk, "' is not in the vocab");
  }

  const auto merges_it = model.find("merges");
  if (merges_it == model.end() || merges_it->is_null()) return;
  TRIMKV_CHECK(merges_it->is_array(), Format, file, ": model.merges must be an array");
  int32_t rank = 0;
  for (const auto& merge : *merges_it) {
    std::string left, right;
    if (merge.is_string()) {  // "a b": split at the first space, as HF does
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      TRIMKV_CHECK(space != std::string::npos, Format, file, ": merge ", rank, " '", line,
                   "' is not of the form \"a b\"");
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else {
      TRIMKV_CHECK(merge.is_array() && merge.size() == 2, Format, file, ": merge ", rank,
                   " must be \"a b\" or [\"a\", \"b\"]");
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    const int32_t a = token_to_id(left), b = token_to_id(right);
    const std::string merged =
        left + (right.compare(0, m_prefix.size(), m_prefix) == 0 ? right.substr(m_prefix.size()) : right);
    const int32_t new_id = token_to_id(merged);
    TRIMKV_CHECK(a >= 0 && b >= 0 && new_id >= 0, Format, file, ": merge ", rank, " ('", left,
                 "', '", right, "') uses a token that is not in the vocab");
    m_merges[pair_key(a, b)] = Merge{rank, new_id};  // a repeated pair keeps its last rank, as in HF
    ++rank;
  }
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  const auto it = m_vocab.find(std::string(token));
  return it == m_vocab.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(m_id_to_token.size()) || !m_has_id[id]) return nullptr;
  return &m_id_to_token[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (m_ignore_merges) {
    const int32_t id = token_to_id(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::string key(word);
  if (word.size() < kMaxCachedWord) {
    std::lock_guard<std::mutex> lock(m_cache_mutex);
    const auto it = m_cache.find(key);
    if (it != m_cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (word.size() < kMaxCachedWord) {
    std::lock_guard<std::mutex> lock(m_cache_mutex);
    if (m_cache.size() < kCacheCapacity) m_cache.emplace(std::move(key), std::move(ids));
  }
}

std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  // Symbols form a doubly linked list over the initial characters; a merged-away symbol has
  // alive == false. Port of tokenizers' Word::merge_all.
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, true});
  };

  int32_t pending_unk = -1;  // an unk symbol not yet added (fuse_unk merges consecutive ones)
  size_t i = 0;
  while (i < word.size()) {
    const size_t begin = i;
    i += utf8::char_length(static_cast<unsigned char>(word[i]));
    if (i > word.size()) i = word.size();
    std::string piece(word.substr(begin, i - begin));
    if (begin > 0) piece = m_prefix + piece;
    if (i == word.size()) piece += m_suffix;

    const int32_t id = token_to_id(piece);
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(id);
      continue;
    }
    if (m_byte_fallback) {
      std::vector<int32_t> byte_ids;
      for (const char c : piece) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(c));
        const int32_t byte_id = token_to_id(name);
        if (byte_id < 0) break;
        byte_ids.push_back(byte_id);
      }
      if (byte_ids.size() == piece.size()) {
        if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
        for (const int32_t b : byte_ids) add(b);
        continue;
      }
    }
    if (m_unk_id >= 0) {
      if (pending_unk >= 0 && !m_fuse_unk) add(pending_unk);
      pending_unk = m_unk_id;
    }
  }
  if (pending_unk >= 0) add(pending_unk);

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator<(const Candidate& o) const {  // priority_queue pops the lowest rank, then pos
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  auto find_merge = [&](int32_t a, int32_t b) -> const Merge* {
    const auto it = m_merges.find(pair_key(a, b));
    return it == m_merges.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k)
    if (const Merge* m = find_merge(symbols[k].id, symbols[k + 1].id))
      queue.push({m->rank, static_cast<int32_t>(k), m->new_id});

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    const Merge* m = find_merge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry

    left.id = top.new_id;
    symbols[left.next].alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;

    if (left.prev >= 0)
      if (const Merge* pm = find_merge(symbols[left.prev].id, left.id))
        queue.push({pm->rank, left.prev, pm->new_id});
    if (left.next >= 0)
      if (const Merge* nm = find_merge(left.id, symbols[left.next].id))
        queue.push({nm->rank, top.pos, nm->new_id});
  }

  std::vector<int32_t> ids;
  for (const auto& s : symbols)
    if (s.alive) ids.push_back(s.id);
  return ids;
}

}  // namespace trimkv
