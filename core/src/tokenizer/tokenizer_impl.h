// The shared, immutable state behind a trimkv::Tokenizer handle (see tokenizer.h).
#pragma once

#include <memory>
#include <string>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "trimkv/core/tokenizer.h"

namespace trimkv {

struct Tokenizer::Impl {
  std::string path;                              // the tokenizer.json, for messages
  std::unique_ptr<Normalizer> normalizer;        // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;   // may be null
  std::unique_ptr<BpeModel> model;               // never null
  AddedVocabulary added;
  std::unique_ptr<PostProcessor> post_processor;  // may be null
  std::unique_ptr<Decoder> decoder;              // never null
  TokenizerConfig config;
  int32_t vocab_size = 0;

  // The token string of id (added tokens first, as HF), nullptr if the id has none.
  const std::string* token_of(int32_t id) const {
    if (const AddedToken* added_token = added.find(id)) return &added_token->token_string;
    return model->id_to_token(id);
  }
  bool is_special(int32_t id) const {
    const AddedToken* added_token = added.find(id);
    return added_token != nullptr && added_token->special;
  }
};

}  // namespace trimkv
