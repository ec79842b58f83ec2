#include <iostream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "trimkv/core/engine.h"
#include "trimkv/core/error.h"
#include "trimkv/core/text_turn_encoder.h"
#include "trimkv/vision/chat_engine.h"

namespace trimkv::cli {

namespace {
// Image sizes whose token counts `info` shows: a small picture, a square photo, a 4:3 one.
constexpr std::pair<int, int> kExampleImages[] = {{96, 96}, {512, 512}, {1024, 768}};
}  // namespace

namespace {

// `trimkv info --gates FILE`: the gates checked against config.json only (a folder with no
// weights will do: the released gates' real shapes against a config).
int describe_gates(const std::string& dir, const std::string& path, bool json) {
  const GatesFileInfo g = check_gates_file(path, dir);
  if (json) {
    std::cout << nlohmann::json{{"gates", g.path}, {"config", g.config_path}, {"kind", g.kind}, {"layers", g.n_layer},
                                {"kv_heads", g.n_kv_head}, {"hidden_size", g.hidden_size},
                                {"gate_hidden", g.gate_hidden}, {"tied", g.tied}, {"parameters", g.parameters},
                                {"fits", true}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << "gates          " << g.path << "\n"
            << "kind           " << g.kind << (g.tied ? ", output layer tied across layers" : "") << "\n"
            << "shape          " << g.n_layer << " layers, " << g.hidden_size << " -> " << g.gate_hidden
            << (g.kind == "dbtrimkv" ? " -> " + std::to_string(g.gate_hidden) : std::string()) << " -> "
            << g.n_kv_head << " KV heads, " << g.parameters << " parameters\n"
            << "fits           " << g.config_path << " (" << g.model_type << ": " << g.model_layers
            << " layers, hidden " << g.model_hidden << ", " << g.model_kv_heads << " KV heads)\n";
  return 0;
}

}  // namespace

int cmd_info(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "checkpoint folder (config.json, *.safetensors, tokenizer.json) or .gguf file (default: the embedded demo model)"},
      {"gates", "FILE", "check a retention-gates file (.safetensors or the authors' .pth) against the model's config.json alone (no weights needed) and describe it"},
      {"json", "", "print one JSON object"},
      {"help", "", "show this help"},
  };
  add_model_load_option_specs(specs);
  Args args("info", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("info", "Describe a checkpoint: architecture, sizes, dtype.", specs);
    return 0;
  }
  const std::string dir = args.model_dir();
  if (args.has("gates")) return describe_gates(dir, args.get("gates"), args.flag("json"));
  // Vision-language checkpoints load through the VLM family registry; others as text models.
  EngineOptions options;
  model_load_args(args, options);
  std::unique_ptr<vision::ChatEngine> vlm;
  if (vision::ChatEngine::is_vlm_checkpoint(dir)) vlm = vision::ChatEngine::load(dir, options);
  const ModelInfo i = vlm ? vlm->info() : Engine::load(dir, options)->info();
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
      {"kv_bytes_per_token", i.kv_bytes_per_token}, {"kv_dtype", i.kv_dtype}, {"device", i.device}, {"weights_held", i.weights_held},
      {"weights_held_bytes", i.weights_held_bytes}, {"weight_notes", i.weight_notes}, {"weight_cache", i.weight_cache}, {"kernel_isa", i.kernel_isa}};
  // The chat template, as conversations will use it (a broken one is reported, not fatal here).
  std::string chat_template = "none (raw prompts only)";
  try {
    if (!i.embedded_chat_template.empty())
      chat_template = ChatTemplate::from_source(i.embedded_chat_template, embedded_chat_template_origin(dir)).origin();
    else if (const auto t = ChatTemplate::from_folder(dir))
      chat_template = t->origin();
    j["chat_template"] = chat_template;
  } catch (const Error& e) {
    chat_template = std::string("unusable: ") + e.what();
    j["chat_template_error"] = e.what();
  }
  if (vlm) {
    const vision::VisionInfo v = vlm->vision_info();
    j["vision"] = {{"family", v.family}, {"model_type", v.model_type}, {"parameters", v.vision_parameters},
                   {"hidden_size", v.hidden_size}, {"layers", v.n_layer}, {"heads", v.n_head},
                   {"intermediate_size", v.intermediate_size}, {"image_size", v.image_size},
                   {"patch_size", v.patch_size}, {"scale_factor", v.scale_factor},
                   {"tokens_per_tile", v.image_seq_len}, {"image_token_id", v.image_token_id},
                   {"longest_edge", v.longest_edge}, {"tile_size", v.tile_size},
                   {"image_splitting", v.image_splitting}, {"resample", v.resample},
                   {"min_pixels", v.min_pixels}, {"max_pixels", v.max_pixels}};
    nlohmann::json counts = nlohmann::json::object();
    for (const auto& [w, h] : kExampleImages)
      counts[std::to_string(w) + "x" + std::to_string(h)] = vlm->image_token_count(w, h);
    j["vision"]["image_tokens"] = counts;
  }
  if (args.flag("json")) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "model          " << i.dir << "\n"
            << "architecture   " << i.architecture << " (model_type " << i.model_type << ")\n"
            << "family         " << i.family << ": " << i.family_description << "\n"
            << "weights        " << i.parameters << " parameters, stored as " << i.weight_dtype
            << " (" << i.weight_bytes / (1024.0 * 1024.0) << " MiB), held as " << i.weights_held << " ("
            << i.weights_held_bytes / (1024.0 * 1024.0) << " MiB; " << i.kernel_isa << " kernels), activations float32\n"
            << "layers         " << i.n_layer << ", hidden " << i.hidden_size << ", MLP "
            << i.intermediate_size << "\n"
            << "attention      " << i.n_head << " heads, " << i.n_kv_head << " KV heads, head_dim "
            << i.head_dim << ", rope " << i.rope_type << " theta " << i.rope_theta << "\n"
            << "vocabulary     " << i.vocab_size
            << (i.tie_word_embeddings ? " (tied embeddings)" : "") << "\n"
            << "context        " << i.max_position_embeddings << " positions\n"
            << "KV cache       " << i.kv_bytes_per_token << " bytes per token (" << i.kv_dtype
            << "; all layers and KV heads)\n"
            << "device         " << i.device << "\n"
            << "tokenizer      "
            << (i.has_tokenizer ? i.tokenizer_origin + ", " + std::to_string(i.tokenizer_vocab_size) + " ids" : "none")
            << "\n"
            << "chat template  " << chat_template << "\n";
  for (const std::string& note : i.weight_notes) std::cout << "note           " << note << "\n";
  if (!i.weight_cache.empty()) std::cout << "weight cache   " << i.weight_cache << "\n";
  if (vlm) {
    const vision::VisionInfo v = vlm->vision_info();
    std::cout << "vision         " << v.n_layer << " layers, hidden " << v.hidden_size << ", " << v.n_head
              << " heads, MLP " << v.intermediate_size << ", " << v.vision_parameters << " parameters\n";
    if (v.max_pixels > 0) {  // any resolution: a grid of merged patches per image
      std::cout << "images         any size, resized to " << v.min_pixels << ".." << v.max_pixels
                << " pixels in multiples of " << v.patch_size * v.scale_factor << ", patch " << v.patch_size
                << ", " << v.scale_factor << "x" << v.scale_factor << " patches merged per token\n"
                << "preprocessing  " << v.resample << " resampling\n";
    } else {
      std::cout << "images         tiles of " << v.image_size << "x" << v.image_size << " px, patch "
                << v.patch_size << ", pixel shuffle x" << v.scale_factor << " -> " << v.image_seq_len
                << " tokens per tile\n"
                << "preprocessing  longest edge " << v.longest_edge << ", "
                << (v.image_splitting ? "split into tiles + global image" : "one tile per image") << ", "
                << v.resample << " resampling\n";
    }
    std::cout << "image tokens  ";
    for (const auto& [w, h] : kExampleImages) std::cout << " " << w << "x" << h << ": " << vlm->image_token_count(w, h) << ";";
    std::cout << " (--image-size changes these)\n";
  }
  return 0;
}

}  // namespace trimkv::cli
