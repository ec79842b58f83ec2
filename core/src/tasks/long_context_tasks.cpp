// The long-context task generator: haystacks cut from the corpus, facts placed at depths,
// questions at the end (see long_context_tasks.h).
#include "trimkv/core/long_context_tasks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "fnv1a.h"
#include "trimkv/core/error.h"
#include "trimkv/core/portable_rng.h"

namespace trimkv::tasks {

namespace {

constexpr const char* kColours[] = {"blue",  "red",   "green",  "yellow", "purple", "orange",
                                    "white", "black", "silver", "golden", "brown",  "grey"};
constexpr const char* kObjects[] = {"door", "gate", "locker", "safe", "box", "cabinet", "garage", "vault"};
// Depths of the asked fact, cycled over the task index so every length sees each depth equally.
constexpr double kDepths[] = {0.1, 0.3, 0.5, 0.7, 0.9};
constexpr const char* kIntro = "Read the text below. A few facts are hidden in it; answer the question at the end.";

struct Fact {
  std::string sentence;  // placed in the haystack
  std::string question;  // asks for it
  std::string value;
  std::string reply;     // the whole-sentence answer
};

std::vector<std::string> split_on(const std::string& text, std::string_view sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t at = text.find(sep, start);
    const size_t end = at == std::string::npos ? text.size() : at;
    if (end > start) out.push_back(text.substr(start, end - start));
    if (at == std::string::npos) break;
    start = at + sep.size();
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

// Paragraphs of about `budget` tokens: from a random document of the split, starting at a random
// paragraph, going on in another random document when one ends; the last paragraph is cut at a
// line boundary to fit. Each paragraph counts its tokens plus one for the blank line before it.
std::vector<std::string> cut_haystack(PortableRng& rng, const std::vector<const HaystackDocument*>& docs,
                                      const TokenCounter& count, int64_t budget, std::vector<std::string>& used) {
  std::vector<std::string> out;
  int64_t have = 0;
  while (have < budget) {
    const HaystackDocument& doc = *docs[rng.index(docs.size())];
    const std::vector<std::string> paragraphs = split_on(doc.text, "\n\n");
    if (paragraphs.empty()) continue;
    if (std::find(used.begin(), used.end(), doc.id) == used.end()) used.push_back(doc.id);
    for (size_t i = rng.index(paragraphs.size()); i < paragraphs.size() && have < budget; ++i) {
      const int64_t n = count(paragraphs[i]) + 1;
      if (have + n <= budget) {
        out.push_back(paragraphs[i]);
        have += n;
        continue;
      }
      std::vector<std::string> kept;
      for (const std::string& line : split_on(paragraphs[i], "\n")) {
        const int64_t m = count(line) + 1;
        if (have + m > budget) break;
        kept.push_back(line);
        have += m;
      }
      if (!kept.empty()) out.push_back(join(kept, "\n"));
      have = budget;
    }
  }
  return out;
}

// Inserts each sentence as its own paragraph at its depth (0: before the first paragraph, 1:
// after the last); sentences at equal depths keep their order.
void place(std::vector<std::string>& paragraphs, const std::vector<std::pair<double, std::string>>& facts) {
  std::vector<std::pair<size_t, size_t>> at;  // (slot, fact index)
  const size_t n = paragraphs.size();
  for (size_t f = 0; f < facts.size(); ++f)
    at.emplace_back(static_cast<size_t>(std::lround(facts[f].first * static_cast<double>(n))), f);
  std::sort(at.begin(), at.end());
  for (size_t k = at.size(); k-- > 0;)
    paragraphs.insert(paragraphs.begin() + static_cast<std::ptrdiff_t>(at[k].first), facts[at[k].second].second);
}

std::vector<std::string> distinct_values(PortableRng& rng, size_t n) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  while (out.size() < n) {
    std::string v = std::to_string(rng.uniform_int(1000, 9999));
    if (seen.insert(v).second) out.push_back(v);
  }
  return out;
}

// Facts "The secret number of the <colour> <object> is <value>." with distinct colours; one
// object for all when `same_object` (distractors differ only in the colour), else one each.
// Worded "secret number", not "code": in haystacks of C headers and manual pages SmolLM2-135M
// read "What is the code for the golden garage?" as a request for program code and began a
// code block (full cache, needle@1k: 2 of 8 right; with this wording and the question asking
// for "the number": 8 of 8).
std::vector<Fact> code_facts(PortableRng& rng, size_t n, bool same_object) {
  std::vector<size_t> colours(std::size(kColours));
  for (size_t i = 0; i < colours.size(); ++i) colours[i] = i;
  for (size_t i = 0; i + 1 < colours.size(); ++i) std::swap(colours[i], colours[i + rng.index(colours.size() - i)]);
  const std::vector<std::string> values = distinct_values(rng, n);
  const size_t object = rng.index(std::size(kObjects));
  std::vector<Fact> out;
  for (size_t i = 0; i < n; ++i) {
    const std::string key =
        std::string("the ") + kColours[colours[i]] + " " + kObjects[same_object ? object : rng.index(std::size(kObjects))];
    const std::string sentence = "The secret number of " + key + " is " + values[i] + ".";
    out.push_back({sentence, "What is the secret number of " + key + "? Answer with the number.", values[i], sentence});
  }
  return out;
}

std::string variable_name(PortableRng& rng) {
  std::string s;
  for (int i = 0; i < 3; ++i) s += static_cast<char>('A' + rng.uniform_int(0, 25));
  return s;
}

std::string message(const std::vector<std::string>& paragraphs, const std::string& question, bool intro) {
  return (intro ? std::string(kIntro) + "\n\n" : std::string()) + join(paragraphs, "\n\n") + "\n\n" + question;
}

}  // namespace

const char* task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::Needle: return "needle";
    case TaskKind::MultiKey: return "multikey";
    case TaskKind::MultiTurn: return "multiturn";
    case TaskKind::VariableTracking: return "vartrack";
    case TaskKind::Perplexity: return "ppl";
    case TaskKind::Text: return "text";
  }
  return "?";
}

std::optional<TaskKind> task_kind_named(std::string_view name) {
  for (TaskKind k : kQuestionTaskKinds)
    if (name == task_kind_name(k)) return k;
  for (TaskKind k : {TaskKind::Perplexity, TaskKind::Text})
    if (name == task_kind_name(k)) return k;
  return std::nullopt;
}

std::string length_label(int64_t length) {
  return length % 1024 == 0 ? std::to_string(length / 1024) + "k" : std::to_string(length);
}

LongContextTask make_long_context_task(const std::vector<HaystackDocument>& corpus, const TokenCounter& count,
                                       TaskKind kind, int64_t length, int64_t index, const TaskOptions& o) {
  TRIMKV_CHECK(o.split == "train" || o.split == "test", Input, "split must be 'train' or 'test', got '", o.split, "'");
  TRIMKV_CHECK(length >= 256, Input, "task length must be at least 256 tokens, got ", length);
  TRIMKV_CHECK(index >= 0, Input, "task index must be >= 0, got ", index);
  TRIMKV_CHECK(o.keys >= 2 && o.keys <= 8, Input, "keys must be in 2..8, got ", o.keys);
  TRIMKV_CHECK(o.hops >= 2 && o.hops <= 6, Input, "hops must be in 2..6, got ", o.hops);
  TRIMKV_CHECK(kind != TaskKind::Perplexity || (o.score_last >= 1 && o.score_last <= length / 2), Input,
               "tokens scored must be in 1..", length / 2, " (half the length), got ", o.score_last);
  std::vector<const HaystackDocument*> docs;
  for (const HaystackDocument& d : corpus)
    if (d.split == o.split) docs.push_back(&d);
  TRIMKV_CHECK(!docs.empty(), Input, "the haystack corpus has no '", o.split, "' document");

  const uint64_t split_key = fnv1a(o.split);
  PortableRng rng({static_cast<uint32_t>(o.seed), static_cast<uint32_t>(o.seed >> 32), static_cast<uint32_t>(split_key),
                   static_cast<uint32_t>(kind), static_cast<uint32_t>(length), static_cast<uint32_t>(length >> 32),
                   static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0x7a5c0001u});
  LongContextTask t;
  t.kind = kind;
  t.length = length;
  char number[24];
  std::snprintf(number, sizeof number, "%06lld", static_cast<long long>(index));
  t.id = std::string(task_kind_name(kind)) + "-" + length_label(length) + "-" + number;
  const std::string type = std::string(task_kind_name(kind)) + "@" + length_label(length);
  const double asked_depth = kDepths[index % static_cast<int64_t>(std::size(kDepths))];
  const int64_t intro = count(kIntro) + 2;

  auto answer_of = [&](const Fact& f) { return o.sentence_answers ? f.reply : f.value; };
  auto one_turn = [&](const std::vector<std::pair<double, std::string>>& placed, const std::string& question,
                      const std::string& answer) {
    int64_t overhead = intro + count(question) + 2;
    for (const auto& [depth, sentence] : placed) overhead += count(sentence) + 1;
    std::vector<std::string> paragraphs =
        cut_haystack(rng, docs, count, std::max<int64_t>(64, length - overhead), t.documents);
    place(paragraphs, placed);
    t.turns.push_back({message(paragraphs, question, true), answer, type});
  };

  switch (kind) {
    case TaskKind::Needle: {
      const Fact f = code_facts(rng, 1, false)[0];
      t.depths = {asked_depth};
      one_turn({{asked_depth, f.sentence}}, f.question, answer_of(f));
      break;
    }
    case TaskKind::MultiKey: {
      const std::vector<Fact> facts = code_facts(rng, static_cast<size_t>(o.keys), true);
      std::vector<std::pair<double, std::string>> placed = {{asked_depth, facts[0].sentence}};
      for (size_t i = 1; i < facts.size(); ++i) placed.emplace_back(0.05 + 0.9 * rng.uniform01(), facts[i].sentence);
      t.depths = {asked_depth};
      one_turn(placed, facts[0].question, answer_of(facts[0]));
      break;
    }
    case TaskKind::MultiTurn: {
      // Turn 1: 60% of the length, both facts, asks for the first; turn 2: the rest, more text,
      // asks for the second (shown one turn earlier).
      const std::vector<Fact> facts = code_facts(rng, 2, false);
      const double d2 = 0.05 + 0.9 * rng.uniform01();
      t.depths = {asked_depth, d2};
      const int64_t first = length * 3 / 5;
      int64_t overhead = intro + count(facts[0].question) + count(facts[0].sentence) + count(facts[1].sentence) + 4;
      std::vector<std::string> p1 = cut_haystack(rng, docs, count, std::max<int64_t>(64, first - overhead), t.documents);
      place(p1, {{asked_depth, facts[0].sentence}, {d2, facts[1].sentence}});
      t.turns.push_back({message(p1, facts[0].question, true), answer_of(facts[0]), type});
      const std::string again = "Here is more text.";
      overhead = count(again) + count(facts[1].question) + 4;
      std::vector<std::string> p2 =
          cut_haystack(rng, docs, count, std::max<int64_t>(64, length - first - overhead), t.documents);
      p2.insert(p2.begin(), again);
      t.turns.push_back({message(p2, facts[1].question, false), answer_of(facts[1]), type});
      break;
    }
    case TaskKind::VariableTracking: {
      std::vector<std::string> names;
      while (names.size() < static_cast<size_t>(o.hops)) {
        std::string n = variable_name(rng);
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      }
      const std::string value = distinct_values(rng, 1)[0];
      // The chain in text order: the value first, each later variable set from the one before.
      std::vector<double> at(names.size());
      for (double& d : at) d = 0.05 + 0.9 * rng.uniform01();
      std::sort(at.begin(), at.end());
      std::vector<std::pair<double, std::string>> placed;
      placed.emplace_back(at[0], "Let " + names[0] + " be " + value + ".");
      for (size_t i = 1; i < names.size(); ++i) placed.emplace_back(at[i], "Let " + names[i] + " equal " + names[i - 1] + ".");
      t.depths = at;
      one_turn(placed, "What number is " + names.back() + " equal to?",
               o.sentence_answers ? names.back() + " is equal to " + value + "." : value);
      break;
    }
    case TaskKind::Perplexity:
    case TaskKind::Text: {
      const std::vector<std::string> paragraphs = cut_haystack(rng, docs, count, length, t.documents);
      t.turns.push_back({join(paragraphs, "\n\n"), "", type, kind == TaskKind::Perplexity ? o.score_last : 0});
      break;
    }
  }
  for (const TaskTurn& turn : t.turns) t.tokens += count(turn.text);
  return t;
}

std::string task_json(const LongContextTask& t, const TaskOptions& o) {
  using ojson = nlohmann::ordered_json;
  const ojson task = {{"kind", task_kind_name(t.kind)}, {"length", t.length},    {"tokens", t.tokens},
                      {"depths", t.depths},              {"documents", t.documents}, {"split", o.split},
                      {"seed", o.seed}};
  if (t.kind == TaskKind::Text) return ojson{{"id", t.id}, {"text", t.turns.at(0).text}, {"task", task}}.dump();
  ojson turns = ojson::array();
  for (const TaskTurn& turn : t.turns)
    if (turn.score_last > 0)
      turns.push_back({{"text", turn.text}, {"score_last", turn.score_last}, {"type", turn.type}});
    else
      turns.push_back({{"text", turn.text}, {"answer", turn.answer}, {"type", turn.type}, {"about", ojson::array()}});
  return ojson{{"id", t.id}, {"images", ojson::array()}, {"turns", turns}, {"task", task}}.dump();
}

}  // namespace trimkv::tasks
