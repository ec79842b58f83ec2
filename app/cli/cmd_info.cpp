#include <iostream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "trimkv/core/engine.h"

namespace trimkv::cli {

int cmd_info(int argc, char** argv, int first) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "checkpoint folder (config.json, *.safetensors, tokenizer.json)"},
      {"json", "", "print one JSON object"},
      {"help", "", "show this help"},
  };
  Args args("info", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("info", "Describe a checkpoint: architecture, sizes, dtype.", specs);
    return 0;
  }
  const ModelInfo i = Engine::load(args.require("model"))->info();
  nlohmann::json j = {
      {"dir", i.dir}, {"architecture", i.architecture}, {"model_type", i.model_type},
      {"family", i.family}, {"dtype", i.weight_dtype}, {"weight_bytes", i.weight_bytes},
      {"parameters", i.parameters}, {"layers", i.n_layer}, {"hidden_size", i.hidden_size},
      {"intermediate_size", i.intermediate_size}, {"heads", i.n_head}, {"kv_heads", i.n_kv_head},
      {"head_dim", i.head_dim}, {"vocab_size", i.vocab_size},
      {"max_position_embeddings", i.max_position_embeddings},
      {"tie_word_embeddings", i.tie_word_embeddings}, {"rope_type", i.rope_type},
      {"rope_theta", i.rope_theta}, {"tokenizer", i.has_tokenizer},
      {"tokenizer_vocab_size", i.tokenizer_vocab_size}, {"eos_token_ids", i.eos_token_ids},
      {"kv_bytes_per_token", i.kv_bytes_per_token}};
  if (args.flag("json")) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "model          " << i.dir << "\n"
            << "architecture   " << i.architecture << " (model_type " << i.model_type << ")\n"
            << "family         " << i.family << ": " << i.family_description << "\n"
            << "weights        " << i.parameters << " parameters, stored as " << i.weight_dtype
            << " (" << i.weight_bytes / (1024.0 * 1024.0) << " MiB), computed in float32\n"
            << "layers         " << i.n_layer << ", hidden " << i.hidden_size << ", MLP "
            << i.intermediate_size << "\n"
            << "attention      " << i.n_head << " heads, " << i.n_kv_head << " KV heads, head_dim "
            << i.head_dim << ", rope " << i.rope_type << " theta " << i.rope_theta << "\n"
            << "vocabulary     " << i.vocab_size
            << (i.tie_word_embeddings ? " (tied embeddings)" : "") << "\n"
            << "context        " << i.max_position_embeddings << " positions\n"
            << "KV cache       " << i.kv_bytes_per_token << " bytes per token (all layers and KV heads)\n"
            << "tokenizer      "
            << (i.has_tokenizer ? "tokenizer.json, " + std::to_string(i.tokenizer_vocab_size) + " ids" : "none")
            << "\n";
  return 0;
}

}  // namespace trimkv::cli
