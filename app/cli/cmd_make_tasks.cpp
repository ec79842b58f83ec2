// `trimkv make-tasks`: writes long-context text tasks (needles in haystacks of real text) as
// conversation JSONL for eval, eval-sweep and train-gates (issue 20).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "args.h"
#include "commands.h"
#include "trimkv/core/atomic_write.h"
#include "trimkv/core/error.h"
#include "trimkv/core/gguf.h"
#include "trimkv/core/long_context_tasks.h"
#include "trimkv/core/tokenizer.h"

namespace trimkv::cli {

int cmd_make_tasks(int argc, char** argv, int first) {
  namespace t = tasks;
  const std::vector<OptionSpec> specs = {
      {"corpus", "FILE", "haystack corpus (data/haystack/corpus.jsonl in the source tree)"},
      {"model", "DIR", "checkpoint folder or .gguf file whose tokenizer measures the lengths"},
      {"out", "FILE", "JSONL file to write (replaced atomically)"},
      {"split", "NAME", "train | test: whose corpus documents make the haystacks (default test)"},
      {"tasks", "A,B,...",
       "task kinds: needle, multikey, multiturn, vartrack (default: these four), ppl (perplexity of a text's last "
       "tokens), text (plain text lines for train-gates)"},
      {"lengths", "N,...", "target lengths in tokens of the user messages, at least 256 (default 1024,2048,4096)"},
      ranged_int("n", "N", "tasks per kind and length (default 10)", 1, 1000000),
      ranged_int("seed", "S", "seed (default 0)", 0, 2147483647),
      ranged_int("keys", "K", "multikey: facts in the haystack, one asked (default 4)", 2, 8),
      ranged_int("hops", "H", "vartrack: variables in the chain (default 2)", 2, 6),
      ranged_int("score-last", "N", "ppl: tokens scored at the end of each text, at most half its length (default 256)", 1, 500000),
      {"sentence-answers", "", "answers as the whole sentence a model replies (training data for train-gates)"},
      {"help", "", "show this help"},
  };
  Args args("make-tasks", specs, argc, argv, first);
  if (args.flag("help")) {
    std::cout << Args::usage("make-tasks",
                             "Write long-context tasks: facts hidden at chosen depths in haystacks of real text "
                             "(manual pages, licences, documentation), asked for at the end; one conversation per "
                             "line, scored by trimkv eval --match contains.",
                             specs);
    return 0;
  }
  const std::string corpus_path = args.require("corpus"), out = args.require("out");
  const std::string model = args.require("model");
  t::TaskOptions o;
  o.split = args.get("split", "test");
  if (o.split != "train" && o.split != "test")
    throw UsageError("option '--split' must be 'train' or 'test', got '" + o.split + "'");
  o.seed = static_cast<uint64_t>(args.get_int64("seed", 0));
  o.keys = args.get_int("keys", 4);
  o.hops = args.get_int("hops", 2);
  o.score_last = args.get_int64("score-last", 256);
  o.sentence_answers = args.flag("sentence-answers");
  const int n = args.get_int("n", 10);
  std::vector<t::TaskKind> kinds;
  for (const std::string& name : split_list(args.get("tasks", "needle,multikey,multiturn,vartrack"), ',')) {
    const auto k = t::task_kind_named(name);
    if (!k)
      throw UsageError("option '--tasks': unknown task '" + name + "' (needle, multikey, multiturn, vartrack, ppl, text)");
    kinds.push_back(*k);
  }
  if (kinds.empty()) throw UsageError("option '--tasks' gives no task");
  std::vector<int64_t> lengths;
  for (const std::string& s : split_list(args.get("lengths", "1024,2048,4096"), ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || v < 256 || v > 1000000)
      throw UsageError("option '--lengths': '" + s + "' is not a length in 256..1000000 tokens");
    if (o.score_last > v / 2 && std::find(kinds.begin(), kinds.end(), t::TaskKind::Perplexity) != kinds.end())
      throw UsageError("option '--score-last': " + std::to_string(o.score_last) + " tokens is more than half of length " + s);
    lengths.push_back(v);
  }
  if (lengths.empty()) throw UsageError("option '--lengths' gives no length");

  const std::vector<t::HaystackDocument> corpus = t::read_haystack_corpus(corpus_path);
  const Tokenizer tok = std::filesystem::path(model).extension() == ".gguf"
                            ? Tokenizer::from_gguf(GgufFile(model))
                            : Tokenizer::from_folder(args.model_dir());
  const t::TokenCounter count = [&](std::string_view text) {
    return static_cast<int64_t>(tok.encode(text, false).size());
  };
  std::string jsonl;
  int64_t written = 0, tokens = 0;
  for (t::TaskKind kind : kinds)
    for (int64_t length : lengths)
      for (int64_t i = 0; i < n; ++i) {
        const t::LongContextTask task = t::make_long_context_task(corpus, count, kind, length, i, o);
        jsonl += t::task_json(task, o) + "\n";
        ++written;
        tokens += task.tokens;
      }
  write_file_atomic(out, jsonl);
  std::cerr << "make-tasks: " << written << " conversations (" << tokens << " tokens of user text, split " << o.split
            << ") -> " << out << "\n";
  return 0;
}

}  // namespace trimkv::cli
