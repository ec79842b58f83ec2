// Long-context tasks for text models (issue 20): facts hidden in haystacks of real text, asked
// for at the end. The haystacks come from a corpus of documents that ship on a Debian machine
// (data/haystack/corpus.jsonl, made by data/haystack/collect.py); each document belongs to a
// "train" or "test" split, and a task draws only from its own split's documents, so gates
// trained on training tasks never saw a test haystack.
//
// Task kinds (the prompt is one user turn unless said otherwise):
//   needle     one fact ("The secret number of the blue door is 4821.") at a chosen depth; "What
//              is the secret number of the blue door? Answer with the number."
//   multikey   several facts of the same form (other colours, same object), one asked: the
//              others are distractors competing for attention;
//   multiturn  two facts in a first turn, which asks for one; a second turn adds more text and
//              asks for the other, so the answer needs an entry kept across turns;
//   vartrack   a chain of assignments spread through the text ("Let QKX be 4821." ... "Let TRB
//              equal QKX."); "What number is TRB equal to?"
//   ppl        language modelling: a stretch of one document (running into another when it ends),
//              raw text without chat template, whose last `score_last` tokens are scored
//              (perplexity, eval's scoring turns);
//   text       the same stretch as a {"text": ...} line: plain text for train-gates.
// Each task is a pure function of (corpus, seed, split, kind, length, index): the random numbers
// come from PortableRng, the lengths from the caller's token counter (the model's tokenizer).
// Written as world-conversation JSONL lines (no images), which `trimkv eval`, `eval-sweep` and
// `train-gates` read; the expected answer is the value alone, found in a sentence-long reply by
// eval's --match contains.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trimkv::tasks {

struct HaystackDocument {
  std::string id;     // "man/tar.1", "license/GPL-3", ...
  std::string kind;   // license, man, doc, comment
  std::string split;  // train | test
  std::string text;
};

// Reads corpus.jsonl ({"id", "kind", "split", "text", ...} per line). Error{Io} for a missing
// file; Error{Format} naming "FILE:LINE" for a malformed line, a missing field, a split other than
// train/test, an empty text or an id given twice.
std::vector<HaystackDocument> read_haystack_corpus(const std::string& path);

enum class TaskKind { Needle, MultiKey, MultiTurn, VariableTracking, Perplexity, Text };
inline constexpr TaskKind kQuestionTaskKinds[] = {TaskKind::Needle, TaskKind::MultiKey, TaskKind::MultiTurn,
                                                  TaskKind::VariableTracking};
const char* task_kind_name(TaskKind kind);  // needle, multikey, multiturn, vartrack, ppl, text
std::optional<TaskKind> task_kind_named(std::string_view name);

// Tokens in a text (without special tokens); the generator sizes haystacks with it.
using TokenCounter = std::function<int64_t(std::string_view)>;

struct TaskOptions {
  std::string split = "test";  // whose documents make the haystacks
  uint64_t seed = 0;
  int keys = 4;   // multikey: facts in the haystack, one of them asked (2..8)
  int hops = 2;   // vartrack: variables in the chain (2..6)
  int64_t score_last = 256;  // ppl: tokens scored at the end (1..length/2)
  // Answers as the whole sentence a model would reply ("The secret number of the blue door is 4821.")
  // instead of the value alone: training data for train-gates, whose labels are the answers.
  bool sentence_answers = false;
};

struct TaskTurn {
  std::string text;    // the user's message (ppl: the raw text)
  std::string answer;  // the expected value ("4821"); empty for ppl
  std::string type;    // kind@length, e.g. "needle@2k": eval reports accuracy per task and length
  int64_t score_last = 0;  // ppl: the tokens scored at the end of `text` (0: a question)
};

struct LongContextTask {
  std::string id;  // kind-length-index, e.g. "needle-2k-000003"
  TaskKind kind = TaskKind::Needle;
  int64_t length = 0;           // the target: tokens of all user messages together
  int64_t tokens = 0;           // what they measure (the counter's tokens of each message, summed)
  std::vector<double> depths;   // where each asked fact sits in its haystack, 0 (start) .. 1 (end)
  std::vector<std::string> documents;  // the corpus documents the haystack was cut from
  std::vector<TaskTurn> turns;
};

// The length label of a type: 2048 -> "2k", 1500 -> "1500".
std::string length_label(int64_t length);

// Task `index` of `kind` whose user messages together hold about `length` tokens (within a few
// percent; the haystack is cut at paragraph or line boundaries). Error{Input} when the corpus has
// no document of the split, the length is below 256 tokens or an option is out of range.
LongContextTask make_long_context_task(const std::vector<HaystackDocument>& corpus, const TokenCounter& count,
                                       TaskKind kind, int64_t length, int64_t index, const TaskOptions& options);

// One JSONL line (no newline): {"id", "images": [], "turns": [{"text", "answer", "type",
// "about": []}], "task": {"kind", "length", "tokens", "depths", "documents", "split", "seed"}};
// a ppl turn has "score_last": N in place of "answer"; a text task is {"id", "text", "task"}.
std::string task_json(const LongContextTask& task, const TaskOptions& options);

}  // namespace trimkv::tasks
