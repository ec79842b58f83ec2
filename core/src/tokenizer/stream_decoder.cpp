#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"
#include "trimkv/core/tokenizer.h"

namespace trimkv {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : m_tokenizer(tokenizer), m_skip_special(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  const Tokenizer::Impl& m = *m_tokenizer.m_impl;
  const std::string* token = m.token_of(id);
  if (token == nullptr || (m_skip_special && m.is_special(id))) return {};
  m.decoder->append_token(*token, m_first, m_pending);
  m_first = false;
  // Lossy decoding by maximal subparts is prefix-stable, so emitting all but an incomplete
  // tail now gives the same text as decoding everything at the end.
  std::string text;
  m_pending.erase(0, utf8::append_lossy(text, m_pending, /*final=*/false));
  return text;
}

std::string StreamDecoder::flush() {
  std::string text;
  utf8::append_lossy(text, m_pending, /*final=*/true);
  m_pending.clear();
  m_first = true;
  return text;
}

}  // namespace trimkv
