#include "tokenizer/added_tokens.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"
#include "trimkv/core/error.h"

namespace trimkv {
namespace {

bool get_flag(const nlohmann::json& entry, const char* key, bool fallback) {
  const auto it = entry.find(key);
  return it == entry.end() || it->is_null() ? fallback : it->get<bool>();
}

// Last code point of the valid UTF-8 text (precondition: non-empty).
char32_t last_char(std::string_view text) {
  size_t i = text.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return utf8::next(text, i);
}

}  // namespace

void AddedVocabulary::Matcher::add(std::string pattern, size_t token_index) {
  if (pattern.empty()) return;  // an empty token would match everywhere; HF cannot use it either
  m_buckets[static_cast<unsigned char>(pattern[0])].emplace_back(std::move(pattern), token_index);
  ++m_n_patterns;
}

void AddedVocabulary::Matcher::finish() {
  for (auto& bucket : m_buckets)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

std::vector<AddedVocabulary::Matcher::Match> AddedVocabulary::Matcher::find_all(std::string_view text) const {
  std::vector<Match> matches;
  if (m_n_patterns == 0) return matches;
  size_t i = 0;
  while (i < text.size()) {
    const auto& bucket = m_buckets[static_cast<unsigned char>(text[i])];
    // Longest first: the first pattern found at i is the longest match starting there.
    const auto hit = std::find_if(bucket.begin(), bucket.end(), [&](const auto& candidate) {
      return text.compare(i, candidate.first.size(), candidate.first) == 0;
    });
    if (hit == bucket.end()) {
      ++i;
      continue;
    }
    matches.push_back({i, i + hit->first.size(), hit->second});
    i += hit->first.size();
  }
  return matches;
}

AddedVocabulary::AddedVocabulary(const nlohmann::json& added_tokens, const Normalizer* normalizer,
                                 const std::string& file) {
  if (added_tokens.is_null()) return;
  TRIMKV_CHECK(added_tokens.is_array(), Format, file, ": added_tokens must be an array");
  m_tokens.reserve(added_tokens.size());
  for (const auto& entry : added_tokens) {
    TRIMKV_CHECK(entry.is_object() && entry.contains("id") && entry.contains("content"), Format, file,
                 ": every added token needs \"id\" and \"content\"");
    AddedToken token;
    token.id = entry.at("id").get<int32_t>();
    TRIMKV_CHECK(token.id >= 0, Format, file, ": added token id ", token.id, " is negative");
    token.content = entry.at("content").get<std::string>();
    TRIMKV_CHECK(utf8::is_valid(token.content), Format, file, ": added token ", token.id,
                 " is not valid UTF-8");
    token.special = get_flag(entry, "special", false);
    token.single_word = get_flag(entry, "single_word", false);
    token.lstrip = get_flag(entry, "lstrip", false);
    token.rstrip = get_flag(entry, "rstrip", false);
    token.normalized = get_flag(entry, "normalized", !token.special);
    m_tokens.push_back(std::move(token));
  }
  for (size_t k = 0; k < m_tokens.size(); ++k) {
    AddedToken& token = m_tokens[k];
    token.token_string = token.normalized && normalizer ? normalizer->normalize(token.content) : token.content;
    m_by_id[token.id] = k;
    m_by_content[token.content] = token.id;
    m_max_id = std::max(m_max_id, token.id);
    if (token.normalized)
      m_normalized_matcher.add(token.token_string, k);
    else
      m_raw_matcher.add(token.content, k);
  }
  m_raw_matcher.finish();
  m_normalized_matcher.finish();
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  const auto it = m_by_id.find(id);
  return it == m_by_id.end() ? nullptr : &m_tokens[it->second];
}

int32_t AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = m_by_content.find(std::string(content));
  return it == m_by_content.end() ? -1 : it->second;
}

void AddedVocabulary::split_piece(std::string_view text, const Matcher& matcher,
                                  std::vector<TextPiece>& out) const {
  auto emit = [&](size_t begin, size_t end, int32_t id) {
    if (end > begin) out.push_back({std::string(text.substr(begin, end - begin)), id});
  };
  size_t start_offset = 0;
  for (const auto& match : matcher.find_all(text)) {
    size_t start = match.begin, stop = match.end;
    const AddedToken& token = m_tokens[match.token_index];
    if (token.single_word) {
      const bool start_space = start == 0 || !utf8::is_word_char(last_char(text.substr(0, start)));
      size_t k = stop;
      const bool stop_space = stop == text.size() || !utf8::is_word_char(utf8::next(text, k));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      // Back over whitespace; clamping to start_offset below keeps pieces from overlapping.
      size_t new_start = start;
      while (new_start > 0) {
        size_t b = new_start - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t k = b;
        if (!utf8::is_whitespace(utf8::next(text, k))) break;
        new_start = b;
      }
      start = new_start;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t k = stop;
        if (!utf8::is_whitespace(utf8::next(text, k))) break;
        stop = k;
      }
    }
    start = std::max(start, start_offset);
    emit(start_offset, start, -1);
    emit(start, stop, token.id);
    start_offset = stop;
  }
  emit(start_offset, text.size(), -1);
}

std::vector<TextPiece> AddedVocabulary::extract_and_normalize(std::string_view text,
                                                              const Normalizer* normalizer) const {
  std::vector<TextPiece> raw;
  split_piece(text, m_raw_matcher, raw);
  std::vector<TextPiece> pieces;
  pieces.reserve(raw.size());
  for (auto& piece : raw) {
    if (piece.id >= 0) {
      pieces.push_back(std::move(piece));
    } else {
      const std::string normalized = normalizer ? normalizer->normalize(piece.text) : std::move(piece.text);
      split_piece(normalized, m_normalized_matcher, pieces);
    }
  }
  return pieces;
}

}  // namespace trimkv

