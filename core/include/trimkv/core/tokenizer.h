// Hugging Face tokenizer.json reader with a byte-level BPE encoder / decoder.
//
// Scope (see shared/MODELS.md "Formats"): model type BPE (byte-level, the SmolLM2 / Qwen2 /
// Llama-3 kind; byte_fallback, unk_token, ignore_merges honoured), added tokens with
// single_word / lstrip / rstrip / normalized / special, normalizers NFC / NFD / NFKC / NFKD /
// Sequence, pre-tokenizers ByteLevel / Split / Digits / Sequence, post-processors
// TemplateProcessing / ByteLevel / RobertaProcessing / BertProcessing / Sequence, decoders
// ByteLevel / none. Anything else fails loudly with ErrorKind::Unsupported naming the file and
// the type; a file that is not JSON or lacks "model" fails with ErrorKind::Format.
//
// The pipeline is the one of the Rust `tokenizers` crate, so ids match HF bit for bit:
//   split on added tokens -> normalizer (per piece) -> pre-tokenizer -> BPE -> post-processor.
// Added tokens with normalized == false are cut out of the raw text first; those with
// normalized == true (typically non-special ones) are then matched, in their normalized form,
// on the normalized text between them (so under NFC "cafe\u0301" matches an added "café").
// Leftmost match wins, the longest among those starting at the same byte; lstrip / rstrip
// absorb adjacent Unicode whitespace into the token; single_word requires non-word neighbours.
//
// Thread safety: a Tokenizer is an immutable value handle (cheap to copy, shares its tables);
// every const method may be called from several threads at once (the BPE word cache is
// guarded by a mutex). A StreamDecoder is single-threaded state.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trimkv {

class GgufFile;

// What tokenizer_config.json adds to tokenizer.json: only the fields the runtime uses.
// Ids are -1 when the token is not set or is not in the vocabulary.
struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token, unk_token;
  int32_t bos_id = -1, eos_id = -1, pad_id = -1, unk_id = -1;
  // As written in the file. Informational: encode() follows tokenizer.json's post_processor
  // (what the `tokenizers` library does); a caller that needs the transformers-side override
  // of LlamaTokenizerFast can prepend bos_id itself.
  std::optional<bool> add_bos_token, add_eos_token;
  // The chat template is not the tokenizer's: see chat_template.h (ChatTemplate::from_folder).
};

class Tokenizer {
 public:
  // Loads a tokenizer.json. Throws Error: Io (unreadable), Format (not JSON, no "model",
  // malformed fields), Unsupported (model / normalizer / pre-tokenizer / ... type); every
  // message names the file.
  static Tokenizer from_file(const std::string& path);
  // Loads dir/tokenizer.json and, when present, dir/tokenizer_config.json (see TokenizerConfig).
  static Tokenizer from_folder(const std::string& dir);
  // The vocabulary a GGUF file carries (tokenizer.ggml.*: tokens, token types, merges, the
  // pre-tokenizer named by tokenizer.ggml.pre, bos/eos/pad/unk ids, add_bos_token), rebuilt as
  // the tokenizer.json that model would ship. Byte-level BPE ("gpt2") vocabularies only;
  // Error{Unsupported} names the file and the tokenizer model or pre-tokenizer it does not know.
  static Tokenizer from_gguf(const GgufFile& file);

  // Token ids of `text` (UTF-8; Error Input if it is not valid UTF-8). With add_special_tokens
  // the post-processor's template is applied (e.g. a BOS); SmolLM2 and Qwen2 add nothing.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Text of `ids`. Invalid UTF-8 produced by byte-level tokens becomes U+FFFD (one per maximal
  // invalid subsequence, like Rust's String::from_utf8_lossy used by HF). Ids with no token
  // are skipped, as HF does. skip_special_tokens drops special added tokens.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  std::string id_to_token(int32_t id) const;          // "" if absent
  bool is_special(int32_t id) const;                  // a special added token
  int32_t vocab_size() const;                         // max id + 1, added tokens included
  const TokenizerConfig& config() const;              // empty unless loaded with from_folder
  const std::string& path() const;                    // the tokenizer.json it came from

 private:
  friend class StreamDecoder;
  // A parsed tokenizer.json; `origin` names it in errors.
  static Tokenizer from_json(const nlohmann::json& root, const std::string& origin);
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> m_impl;  // immutable after loading; shared by copies
};

// Incremental decode for generation: push() returns the text completed by one more token and
// never emits half a UTF-8 character; bytes of an unfinished character wait for the next
// token. The concatenation of all push() results and flush() equals
// tokenizer.decode(all ids, skip_special_tokens).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  // Emits what is still pending (an unfinished character becomes U+FFFD) and resets.
  std::string flush();

 private:
  Tokenizer m_tokenizer;   // a shared handle: the decoder does not dangle
  bool m_skip_special;
  bool m_first = true;     // no token emitted yet (a decoder without ByteLevel joins with " ")
  std::string m_pending;   // bytes of a possibly incomplete UTF-8 sequence
};

}  // namespace trimkv
