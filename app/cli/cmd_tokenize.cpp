#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "trimkv/core/engine.h"

namespace trimkv::cli {

int cmd_tokenize(int argc, char** argv, int first) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "checkpoint folder with tokenizer.json, or .gguf file (default: the embedded demo model)"},
      {"text", "T", "text to tokenize"},
      {"text-file", "FILE", "tokenize the contents of FILE instead (UTF-8)"},
      {"no-special", "", "do not add the post-processor's special tokens (BOS...)"},
      {"tokens", "", "also print the token strings"},
      {"help", "", "show this help"},
  };
  Args args("tokenize", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("tokenize", "Print the token ids of a text as JSON.", specs);
    return 0;
  }
  const std::string model = args.model_dir();
  if (args.has("text") == args.has("text-file")) throw UsageError("give exactly one of --text and --text-file");
  std::string text = args.get("text");
  if (args.has("text-file")) {
    std::ifstream in(args.get("text-file"), std::ios::binary);
    if (!in.good()) throw UsageError("cannot read --text-file '" + args.get("text-file") + "'");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto engine = Engine::load(model);
  const auto ids = engine->tokenize(text, !args.flag("no-special"));
  if (!args.flag("tokens")) {
    std::cout << nlohmann::json(ids).dump() << "\n";
    return 0;
  }
  nlohmann::json pieces = nlohmann::json::array();
  for (int32_t id : ids) pieces.push_back(engine->detokenize({id}));
  std::cout << nlohmann::json{{"ids", ids}, {"pieces", pieces}}.dump() << "\n";
  return 0;
}

}  // namespace trimkv::cli
