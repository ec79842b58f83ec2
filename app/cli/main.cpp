// `trimkv`: the command-line face of TrimKV Studio. Errors become one message on stderr and a
// non-zero exit code (2: usage, 1: everything else); nothing aborts on user input.
#include <cstring>
#include <iostream>
#include <string>

#include "args.h"
#include "commands.h"
#include "interrupts.h"
#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/error.h"
#include "trimkv/core/version.h"

namespace {

const char* kUsage =
    "usage: trimkv <command> [options]\n"
    "\n"
    "commands:\n"
    "  info       describe a checkpoint folder (architecture, sizes, dtype)\n"
    "  tokenize   print the token ids of a text as JSON\n"
    "  generate   generate a continuation of a prompt\n"
    "  chat       chat with a vision-language model in the terminal (images, multi-turn)\n"
    "  train-gates  train retention gates (TrimKV / DBTrimKV) on a frozen model\n"
    "  make-world   write a split of the synthetic visual world (JSONL + PNG images)\n"
    "  make-tasks   write long-context text tasks (facts hidden in real text) as JSONL\n"
    "  train-tokenizer  train a byte-level BPE tokenizer.json on world text\n"
    "  eval         score a vision-language model on world conversations\n"
    "  eval-sweep   eval for every eviction policy x KV budget (CSV + Markdown table)\n"
    "  train-demo   train the embedded demo VLM (and its gates) from scratch on the world\n"
    "\n"
    "Run 'trimkv <command> --help' for the options of a command; 'trimkv --version' for the version.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace trimkv::cli;
  trimkv::tune_cpu_runtime(argv);
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    std::cout << trimkv::version_line("trimkv") << "\n";
    return 0;
  }
  const std::string command = argv[1];
  start_interrupt_watcher();  // before any other thread: Ctrl-C never lands on one that computes
  try {
    if (command == "info") return cmd_info(argc, argv, 2);
    if (command == "tokenize") return cmd_tokenize(argc, argv, 2);
    if (command == "generate") return cmd_generate(argc, argv, 2);
    if (command == "chat") return cmd_chat(argc, argv, 2);
    if (command == "train-gates") return cmd_train_gates(argc, argv, 2);
    if (command == "make-world") return cmd_make_world(argc, argv, 2);
    if (command == "make-tasks") return cmd_make_tasks(argc, argv, 2);
    if (command == "train-tokenizer") return cmd_train_tokenizer(argc, argv, 2);
    if (command == "eval") return cmd_eval(argc, argv, 2);
    if (command == "eval-sweep") return cmd_eval_sweep(argc, argv, 2);
    if (command == "train-demo") return cmd_train_demo(argc, argv, 2);
    std::cerr << "trimkv: unknown command '" << command << "'\n\n" << kUsage;
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "trimkv " << command << ": " << e.what() << "\n";
    return 2;
  } catch (const trimkv::Error& e) {
    std::cerr << "trimkv " << command << ": error (" << trimkv::error_kind_name(e.kind())
              << "): " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "trimkv " << command << ": error: " << e.what() << "\n";
    return 1;
  }
}
