// `trimkv train-tokenizer`: trains the byte-level BPE tokenizer of the demo model on world text.
#include <filesystem>
#include <iostream>
#include <string>

#include "args.h"
#include "commands.h"
#include "trimkv/core/bpe_trainer.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/world.h"

namespace trimkv::cli {

int cmd_train_tokenizer(int argc, char** argv, int first) {
  const std::vector<OptionSpec> specs = {
      {"data", "FILE.jsonl", "training text: world JSONL (each conversation in the chat template) or lines "
                             "with a \"text\" string; repeatable, and several files may follow one --data",
       true},
      ranged_int("vocab-size", "N", "vocabulary size, special tokens and the 256 byte tokens included", 1, 2147483647),
      ranged_int("min-frequency", "F", "merge only pairs seen at least F times (default 2)", 1, 2147483647),
      {"out", "FILE", "the tokenizer.json to write"},
      {"help", "", "show this help"},
  };
  // "--data a.jsonl b.jsonl": arguments after --data that are not options are more data files.
  std::vector<std::string> extra_data;
  std::vector<char*> kept(argv, argv + first);
  for (int i = first; i < argc; ++i) {
    kept.push_back(argv[i]);
    if (std::string(argv[i]) == "--data" && i + 1 < argc) {
      kept.push_back(argv[++i]);
      while (i + 1 < argc && argv[i + 1][0] != '-') extra_data.push_back(argv[++i]);
    }
  }
  Args args("train-tokenizer", specs, static_cast<int>(kept.size()), kept.data(), first);
  if (args.flag("help")) {
    std::cout << Args::usage("train-tokenizer",
                             "Train a byte-level BPE tokenizer (Hugging Face tokenizer.json) on world text, "
                             "with the special tokens of the SmolVLM chat template and image expansion.",
                             specs);
    return 0;
  }
  std::vector<std::string> data = args.all("data");
  data.insert(data.end(), extra_data.begin(), extra_data.end());
  if (data.empty()) throw UsageError("option '--data' is required");
  if (!args.has("vocab-size")) throw UsageError("option '--vocab-size' is required");
  const std::string out = args.require("out");

  BpeTrainerOptions options;
  options.vocab_size = args.get_int("vocab-size", 0);
  options.min_frequency = args.get_int("min-frequency", 2);
  const int minimum = static_cast<int>(options.special_tokens.size()) + 256;
  if (options.vocab_size < minimum)
    throw UsageError("option '--vocab-size' must be at least " + std::to_string(minimum) + " (" +
                     std::to_string(options.special_tokens.size()) + " special tokens + 256 byte tokens), got " +
                     std::to_string(options.vocab_size));
  if (options.min_frequency < 1)
    throw UsageError("option '--min-frequency' must be at least 1, got " + std::to_string(options.min_frequency));

  BpeTrainer trainer(options);
  for (const std::string& file : data) {
    std::error_code ec;
    TRIMKV_CHECK(std::filesystem::is_regular_file(file, ec), Io, "--data ", file, ": no such file");
    const std::vector<std::string> texts = vision::world::chat_texts_from_jsonl(file);
    TRIMKV_CHECK(!texts.empty(), Input, "--data ", file, ": the file holds no text (empty)");
    for (const std::string& text : texts) trainer.add_text(text);
  }
  const BpeTrainResult result = trainer.train();
  save_tokenizer_json(result, out);
  std::cout << "wrote " << out << ": " << result.vocab.size() << " tokens (" << result.n_special << " special, 256 bytes, "
            << result.merges.size() << " merges) from " << trainer.n_texts() << " texts, "
            << trainer.n_distinct_words() << " distinct words\n";
  if (static_cast<int32_t>(result.vocab.size()) < options.vocab_size)
    std::cout << "note: fewer tokens than --vocab-size " << options.vocab_size << ": no pair occurs "
              << options.min_frequency << " or more times any more\n";
  return 0;
}

}  // namespace trimkv::cli
