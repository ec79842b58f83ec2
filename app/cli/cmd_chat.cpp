// `trimkv chat`: an interactive terminal conversation with a vision-language model. Lines are
// user turns; commands start with '/'. Errors are printed and the conversation goes on.
#include <filesystem>
#include <iostream>
#include <optional>

#include <unistd.h>

#include "answer_printer.h"
#include "args.h"
#include "commands.h"
#include "interrupts.h"
#include "policy_options.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/idefics3.h"
#include "trimkv/vision/world.h"

namespace trimkv::cli {

namespace {

const char* kChatHelp =
    "  /image PATH   attach an image to your next message (repeatable; use <image> in the\n"
    "                message to place it, otherwise images go first)\n"
    "  /reset        start a new conversation\n"
    "  /stats        KV cache entries by modality, bytes, policy and eviction events\n"
    "  /save FILE    save the conversation (JSON messages with image paths)\n"
    "  /quit         leave (or Ctrl-D); Ctrl-C stops an answer\n";

// What a model of the demo world knows (said when one is loaded), and the note for a question
// outside its grammar: it answers anything with its world's words.
const char* kDemoWorldHint =
    "[demo model: trained here on one small world, not a general model. It knows four shapes (circle, square,\n"
    " triangle, star), six colours (red, green, blue, yellow, purple, orange), counting, positions and several\n"
    " images. Try: /image PATH, then \"What color is the circle?\" or \"In image 2, how many stars are there?\"]\n";
const char* kOutsideDemoWorld =
    "[outside the demo model's world: it only knows the questions above about coloured shapes, so its answer is a "
    "guess]\n";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

int cmd_chat(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = {
      {"model", "DIR", "checkpoint folder (vision-language or text instruct model) or .gguf file (default: the embedded demo model)"},
      {"system", "TEXT", "system message that opens the conversation (and every one after /reset)"},
      {"template-var", "NAME=VALUE", "chat-template variable, e.g. enable_thinking=false (repeatable; "
                                     "VALUE is read as JSON when it is, else as a string)", true},
      ranged_int("max-new-tokens", "N", "tokens per answer at most (default 256)", 1, 1 << 20),
  };
  const std::vector<OptionSpec> sampling = sampling_option_specs();
  specs.insert(specs.end(), sampling.begin(), sampling.end());
  specs.insert(specs.end(), {
      threads_option("CPU threads (default: all cores)"),
      ranged_int("prefill-chunk", "N", "tokens per prefill forward (default 256)", 1, 1 << 20),
      gates_option(),
      {"help", "", "show this help"},
  });
  add_model_load_option_specs(specs);
  add_policy_option_specs(specs);
  Args args("chat", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("chat", "Chat with a model in the terminal, through its own chat template.", specs)
              << "\ncommands during the chat:\n" << kChatHelp << policy_help()
              << "--trace / --trace-csv are written when the chat ends (the conversation since the "
                 "last /reset).\n";
    return 0;
  }
  const std::string model = args.model_dir();
  GenerationParams params;
  params.max_new_tokens = args.get_int("max-new-tokens", 256);
  params.sampling = sampling_arg(args);
  const EvictionSettings eviction = parse_policy_settings(args);  // before the model load
  EngineOptions options;
  options.template_vars = parse_template_vars(args);
  options.threads = threads_arg(args);
  options.prefill_chunk = args.get_int("prefill-chunk", 256);
  options.gates = args.get("gates");
  model_load_args(args, options);
  auto engine = vision::ChatEngine::load(model, options);
  if (eviction_requested(args)) engine->set_eviction(eviction);  // checked against the model
  if (!engine->has_chat_template()) throw UsageError(engine->chat_template_problem());
  engine->set_system_prompt(args.get("system"));
  const ModelInfo info = engine->info();
  const bool opens_thinking = engine->answers_open_thinking();  // answers start inside <think>

  std::cout << "trimkv chat: " << info.dir << " (" << info.family << ", " << info.parameters << " parameters"
            << (engine->takes_images() ? "" : ", text only") << "; template " << engine->chat_template_origin()
            << ")\n";
  if (!info.weight_cache.empty()) std::cout << "weight cache: " << info.weight_cache << "\n";
  std::cout << kChatHelp << std::flush;
  const bool demo_world = vision::is_demo_world_model(info.dir);
  if (demo_world) std::cout << kDemoWorldHint << std::flush;
  std::atomic<bool> cancel{false};  // Ctrl-C stops the turn in flight, not the chat
  std::optional<InterruptAction> ctrl_c(std::in_place, cancel);
  std::vector<std::string> images;
  std::string line;
  while (true) {
    std::cout << "\n> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    line = trim(line);
    if (line.empty()) continue;
    try {
      if (line[0] == '/') {
        const size_t sp = line.find(' ');
        const std::string cmd = line.substr(0, sp);
        const std::string arg = sp == std::string::npos ? "" : trim(line.substr(sp + 1));
        if (cmd == "/quit" || cmd == "/exit") break;
        if (cmd == "/help") {
          std::cout << kChatHelp;
        } else if (cmd == "/image") {
          if (arg.empty()) throw UsageError("/image needs a file path");
          if (!engine->takes_images()) throw UsageError("this is a text model: it cannot take images");
          if (!std::filesystem::is_regular_file(arg)) throw UsageError("no such image file: '" + arg + "'");
          const int64_t tokens = engine->image_token_count(arg);  // decodes it: a bad file is named now
          images.push_back(arg);
          std::cout << "[image " << images.size() << " attached: " << arg << ", " << tokens
                    << " image tokens at this resolution (--image-size)]\n";
        } else if (cmd == "/reset") {
          engine->reset();
          images.clear();
          std::cout << "[new conversation]\n";
        } else if (cmd == "/stats") {
          cancel.store(false);
          engine->catch_up(&cancel);  // after a stopped turn: the cache as the conversation is
          const vision::ConversationState st = engine->state();
          std::cout << "[context " << st.tokens << "/" << st.max_tokens << " tokens; KV entries: "
                    << st.kv_entries << " (" << st.kv_text_entries << " text, " << st.kv_image_entries
                    << " image, " << st.kv_special_entries << " special), " << st.kv_bytes / 1024.0
                    << " KiB; policy " << st.policy << ", budget "
                    << (st.budget_global < 0 ? std::string("unlimited") : std::to_string(st.budget_global))
                    << ", eviction events " << st.eviction_events << ", peak " << st.peak_kv_entries
                    << " entries]\n";
        } else if (cmd == "/save") {
          if (arg.empty()) throw UsageError("/save needs a file name");
          engine->save_transcript(arg);
          std::cout << "[saved " << engine->transcript().size() << " messages to " << arg << "]\n";
        } else {
          throw UsageError("unknown command '" + cmd + "' (/help lists them)");
        }
        continue;
      }
      if (demo_world && !vision::world::parse_question(line)) std::cout << kOutsideDemoWorld << std::flush;
      cancel.store(false);
      std::vector<std::string> turn_images;
      turn_images.swap(images);  // a failed turn drops its images: attach them again
      engine->add_user_turn(line, turn_images, &cancel);
      AnswerPrinter printer(std::cout, opens_thinking, isatty(STDOUT_FILENO) != 0);
      const GenerationResult r =
          engine->respond(params, [&printer](const std::string& piece) { printer.push(piece); }, &cancel);
      printer.finish();
      const vision::ConversationState st = engine->state();
      const int64_t steps = r.tokens.empty() ? 0 : static_cast<int64_t>(r.tokens.size()) - 1;
      std::cout << "\n";
      std::cerr << "[" << r.tokens.size() << " tokens, stop: " << r.stop_reason << ", first token after "
                << static_cast<int64_t>(r.prefill_ms) << " ms, "
                << (r.decode_ms > 0 && steps > 0 ? steps * 1000.0 / r.decode_ms : 0.0) << " tok/s; context "
                << st.tokens << "/" << st.max_tokens << "; KV entries: " << st.kv_text_entries << " text, "
                << st.kv_image_entries << " image, " << st.kv_special_entries << " special; "
                << st.eviction_events << " eviction events]\n";
    } catch (const UsageError& e) {
      std::cout << "error: " << e.what() << "\n";
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Cancelled)  // Ctrl-C before the answer began: the turn is dropped
        std::cout << "[stopped before the answer began; the message was not kept]\n";
      else
        std::cout << "error (" << error_kind_name(e.kind()) << "): " << e.what() << "\n";
    }
  }
  ctrl_c.reset();
  std::cout << "\n";
  cancel.store(false);
  engine->catch_up(&cancel);  // the trace of the conversation, not of a stopped turn
  GenerationResult traced;
  traced.trace = std::make_shared<const Trace>(engine->trace());
  write_trace_outputs(args, traced);
  return 0;
}

}  // namespace trimkv::cli
