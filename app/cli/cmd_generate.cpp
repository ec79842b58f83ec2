#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "interrupts.h"
#include "policy_options.h"
#include "trimkv/core/atomic_write.h"
#include "trimkv/core/engine.h"
#include "trimkv/vision/chat_engine.h"

namespace trimkv::cli {

namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      throw UsageError("--prompt-ids: '" + item + "' is not a token id (expected e.g. 1,2,3)");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw UsageError("--prompt-ids is empty");
  return ids;
}

// Replays `messages` (an optional system message first, then user and assistant turns, ending
// with a user turn) into the conversation engine; the last user turn then awaits its answer.
void replay_messages(vision::ChatEngine& engine, const std::vector<Message>& messages,
                     const std::atomic<bool>* cancel) {
  if (messages.empty() || messages.back().role != "user")
    throw UsageError("the conversation must end with a user message (it is what gets answered)");
  size_t k = 0;
  if (messages[0].role == "system") {
    std::string text;
    for (const ContentPart& p : messages[0].content) text += p.text;
    engine.set_system_prompt(text);
    k = 1;
  }
  for (; k < messages.size(); ++k) {
    const Message& m = messages[k];
    if (m.role == "user") {
      engine.add_user_turn(m.content, cancel);
    } else if (m.role == "assistant") {
      std::string text;
      for (const ContentPart& p : m.content) text += p.text;
      engine.add_assistant_text(text);
    } else {
      throw UsageError("message " + std::to_string(k + 1) + " has role '" + m.role +
                       "': only a first system message, then user and assistant messages");
    }
  }
}

void write_floats(const std::string& path, const std::vector<float>& values) {
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

}  // namespace

int cmd_generate(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "checkpoint folder or .gguf file (default: the embedded demo model)"},
      {"prompt", "T", "prompt text (tokenized with the model's tokenizer)"},
      {"prompt-ids", "1,2,3", "prompt as comma-separated token ids"},
      {"image", "FILE", "image for the next <image> in the prompt (repeatable; with no <image> in the "
                        "prompt, images go first); needs a vision-language model", true},
      {"chat", "", "use the prompt as one user turn of the model's own chat template"},
      {"messages", "FILE", "a conversation (JSON messages, as `trimkv chat` /save writes them) ending with a "
                           "user message: replayed through the chat template, then answered"},
      {"logits", "FILE", "with --chat / --messages: write the logits the answer starts from (float32, "
                         "little-endian, vocab_size values)"},
      {"system", "TEXT", "with --chat: a system message before the user turn"},
      {"template-var", "NAME=VALUE", "with --chat: a chat-template variable, e.g. enable_thinking=false "
                                     "(repeatable; VALUE is read as JSON when it is, else as a string)", true},
      ranged_int("max-new-tokens", "N", "tokens to generate at most (default 64)", 0, 1 << 20),
  };
  const std::vector<OptionSpec> sampling = sampling_option_specs();
  specs.insert(specs.end(), sampling.begin(), sampling.end());
  specs.insert(specs.end(), {
      {"stop", "STRING", "stop when the text contains STRING", true},
      {"ignore-eos", "", "keep generating after the end-of-sequence token"},
      threads_option("CPU threads (default: all cores)"),
      ranged_int("prefill-chunk", "N", "tokens per prefill forward (default 256)", 1, 1 << 20),
      gates_option(),
      {"json", "", "print one JSON object instead of streaming text"},
      {"help", "", "show this help"},
  });
  add_model_load_option_specs(specs);
  add_policy_option_specs(specs);
  Args args("generate", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("generate", "Generate a continuation of a prompt.", specs)
              << policy_help();
    return 0;
  }
  const std::string model = args.model_dir();
  if (int(args.has("prompt")) + int(args.has("prompt-ids")) + int(args.has("messages")) != 1)
    throw UsageError("give exactly one of --prompt, --prompt-ids and --messages");
  GenerationParams params;
  params.max_new_tokens = args.get_int("max-new-tokens", 64);
  params.sampling = sampling_arg(args);  // before the (slow) model load
  params.stop_strings = args.all("stop");
  params.stop_at_eos = !args.flag("ignore-eos");
  const EvictionSettings eviction = parse_policy_settings(args);  // likewise
  std::vector<int32_t> prompt_ids;
  if (args.has("prompt-ids")) prompt_ids = parse_ids(args.get("prompt-ids"));

  EngineOptions options;
  options.threads = threads_arg(args);
  options.prefill_chunk = args.get_int("prefill-chunk", 256);
  options.gates = args.get("gates");
  model_load_args(args, options);
  options.template_vars = parse_template_vars(args);
  // Chat-template prompts, images and vision-language checkpoints go through the conversation
  // engine; token-id prompts and raw text on text-only checkpoints through the text engine.
  const std::vector<std::string> images = args.all("image");
  const bool chat_turn = args.flag("chat") || args.has("messages");
  if (!chat_turn && (args.has("system") || args.has("template-var") || args.has("logits")))
    throw UsageError("--system, --template-var and --logits need --chat or --messages");
  if (args.has("messages") && (!images.empty() || args.has("system")))
    throw UsageError("--messages holds the whole conversation: no --image or --system with it");
  const bool conversation = !images.empty() || chat_turn ||
                            (args.has("prompt") && vision::ChatEngine::is_vlm_checkpoint(model));
  if (conversation && args.has("prompt-ids"))
    throw UsageError("--image and --chat need --prompt text, not --prompt-ids");
  std::vector<Message> messages;  // a chat: the conversation to replay, ending with its question
  if (args.has("messages")) {
    messages = read_messages_file(args.get("messages"));
  } else if (chat_turn) {
    if (args.has("system")) messages.push_back({"system", {ContentPart::text_part(args.get("system"))}});
    messages.push_back({"user", content_from_prompt(args.get("prompt"), images)});
  }
  std::unique_ptr<vision::ChatEngine> chat;
  std::unique_ptr<Engine> engine;
  if (conversation) {
    if (!images.empty() && !vision::ChatEngine::is_vlm_checkpoint(model))
      throw UsageError("--image needs a vision-language checkpoint; '" + model + "' is not one");
    chat = vision::ChatEngine::load(model, options);
    if (chat_turn && !chat->has_chat_template()) throw UsageError(chat->chat_template_problem());
  } else {
    engine = Engine::load(model, options);
    if (args.has("prompt")) prompt_ids = engine->tokenize(args.get("prompt"));
    if (prompt_ids.empty()) throw UsageError("the prompt is empty after tokenization");
  }

  const std::string cache_note = chat ? chat->info().weight_cache : engine->info().weight_cache;
  if (!cache_note.empty()) std::cerr << "[weight cache: " << cache_note << "]\n";
  const bool json = args.flag("json");
  std::atomic<bool> cancel{false};
  std::optional<InterruptAction> ctrl_c(std::in_place, cancel);
  TextCallback stream;
  if (!json) stream = [](const std::string& piece) { std::cout << piece << std::flush; };
  GenerationResult r;
  if (chat_turn) {
    if (eviction_requested(args)) chat->set_eviction(eviction);  // the whole conversation under it
    replay_messages(*chat, messages, &cancel);
    for (const vision::StreamToken& t : chat->tokens()) prompt_ids.push_back(t.id);
    if (args.has("logits")) write_floats(args.get("logits"), chat->pending_logits());
    r = chat->respond(params, stream, &cancel);
  } else if (chat) {
    r = chat->generate(args.get("prompt"), images, params, eviction, false, stream, &cancel);
    prompt_ids = r.prompt_ids;
  } else {
    r = engine->generate(prompt_ids, params, eviction, stream, &cancel);
  }
  ctrl_c.reset();
  write_trace_outputs(args, r);

  const double prefill_tps = r.prefill_ms > 0 ? r.prompt_tokens * 1000.0 / r.prefill_ms : 0;
  const int64_t steps = r.tokens.empty() ? 0 : static_cast<int64_t>(r.tokens.size()) - 1;
  const double decode_tps = r.decode_ms > 0 && steps > 0 ? steps * 1000.0 / r.decode_ms : 0;
  if (json) {
    nlohmann::json j = {{"tokens", r.tokens},
                        {"prompt_ids", prompt_ids},
                        {"text", r.text},
                        {"prompt_tokens", r.prompt_tokens},
                        {"generated_tokens", r.tokens.size()},
                        {"stop_reason", r.stop_reason},
                        {"kv_entries", r.kv_entries},
                        {"kv_bytes", r.kv_bytes},
                        {"kv_text_entries", r.kv_text_entries},
                        {"kv_image_entries", r.kv_image_entries},
                        {"policy", r.policy},
                        {"budget", r.budget_global < 0 ? nlohmann::json(nullptr)
                                                       : nlohmann::json(r.budget_global)},
                        {"eviction_events", r.eviction_events},
                        {"peak_kv_entries", r.peak_kv_entries},
                        {"prefill_ms", r.prefill_ms},
                        {"decode_ms", r.decode_ms},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"decode_tokens_per_s", decode_tps}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "\n";
    std::cerr << "[" << r.prompt_tokens << " prompt tokens, " << r.tokens.size()
              << " generated, stop: " << r.stop_reason << ", prefill " << prefill_tps
              << " tok/s, decode " << decode_tps << " tok/s, KV " << r.kv_entries << " entries / "
              << r.kv_bytes / 1024.0 << " KiB]\n";
  }
  return r.stop_reason == "cancelled" ? 130 : 0;
}

}  // namespace trimkv::cli
