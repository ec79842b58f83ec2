// The long-context task generator (issue 20), checked from the outside: every task's answer is
// re-derived by parsing its text (the facts and assignment chains it states), lengths are
// measured with SmolLM2's real tokenizer, haystack paragraphs are traced back to documents of
// the task's split only, and the committed corpus is read as a user's file would be.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/long_context_tasks.h"
#include "trimkv/core/tokenizer.h"

using namespace trimkv;
using trimkv::test::ScratchDir;
using trimkv::test::write_text;
namespace t = trimkv::tasks;

namespace {

std::string corpus_path() { return std::string(TRIMKV_SOURCE_DIR) + "/data/haystack/corpus.jsonl"; }

const std::vector<t::HaystackDocument>& corpus() {
  static const std::vector<t::HaystackDocument> c = t::read_haystack_corpus(corpus_path());
  return c;
}

const Tokenizer& smollm2() {
  static const Tokenizer tok = Tokenizer::from_folder(std::string(TRIMKV_TEST_DATA_DIR) + "/tokenizers/smollm2");
  return tok;
}

t::TokenCounter real_counter() {
  return [](std::string_view s) { return static_cast<int64_t>(smollm2().encode(s, false).size()); };
}

std::vector<std::string> paragraphs_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = text.find("\n\n", start);
    out.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 2;
  }
}

// What the text says: code facts (key -> value) and assignments (name -> value or other name).
struct Stated {
  std::map<std::string, std::vector<std::string>> codes;  // key -> every value stated for it
  std::map<std::string, std::string> let_value, let_name;
  std::vector<std::string> fact_paragraphs;                // in order
};

Stated parse(const std::vector<std::string>& paragraphs) {
  static const std::regex code("^The secret number of (the [a-z]+ [a-z]+) is ([0-9]{4})\\.$");
  static const std::regex let_v("^Let ([A-Z]{3}) be ([0-9]{4})\\.$");
  static const std::regex let_n("^Let ([A-Z]{3}) equal ([A-Z]{3})\\.$");
  Stated s;
  std::smatch m;
  for (const std::string& p : paragraphs) {
    if (std::regex_match(p, m, code)) s.codes[m[1]].push_back(m[2]);
    else if (std::regex_match(p, m, let_v)) s.let_value[m[1]] = m[2];
    else if (std::regex_match(p, m, let_n)) s.let_name[m[1]] = m[2];
    else continue;
    s.fact_paragraphs.push_back(p);
  }
  return s;
}

// The value a question asks for, derived from the text alone ("" when it cannot be).
std::string derive(const Stated& s, const std::string& question) {
  std::smatch m;
  static const std::regex ask_code("^What is the secret number of (the [a-z]+ [a-z]+)\\? Answer with the number\\.$");
  static const std::regex ask_var("^What number is ([A-Z]{3}) equal to\\?$");
  if (std::regex_match(question, m, ask_code)) {
    const auto it = s.codes.find(m[1]);
    return it != s.codes.end() && it->second.size() == 1 ? it->second[0] : "";
  }
  if (std::regex_match(question, m, ask_var)) {
    std::string name = m[1];
    for (int hop = 0; hop < 10; ++hop) {
      if (s.let_value.count(name)) return s.let_value.at(name);
      if (!s.let_name.count(name)) return "";
      name = s.let_name.at(name);
    }
  }
  return "";
}

}  // namespace

TEST_CASE("tasks: the committed haystack corpus reads, both splits hold real text", "[tasks]") {
  const auto& c = corpus();
  size_t train = 0, test = 0;
  std::set<std::string> kinds;
  for (const auto& d : c) {
    (d.split == "test" ? test : train) += d.text.size();
    kinds.insert(d.kind);
  }
  CHECK(c.size() > 100);
  CHECK(test > 500000);   // characters: enough for many different 8K-token haystacks
  CHECK(train > 2000000);
  CHECK(kinds == std::set<std::string>{"comment", "doc", "license", "man"});
}

TEST_CASE("tasks: every answer follows from the task's own text", "[tasks]") {
  const t::TokenCounter count = real_counter();
  t::TaskOptions o;
  o.seed = 7;
  for (t::TaskKind kind : t::kQuestionTaskKinds)
    for (int64_t length : {512, 1024, 3000})
      for (int64_t i = 0; i < 4; ++i) {
        const t::LongContextTask task = t::make_long_context_task(corpus(), count, kind, length, i, o);
        INFO(task.id);
        REQUIRE(!task.turns.empty());
        std::vector<std::string> seen;  // paragraphs of the turns so far: a later turn may ask about them
        for (const t::TaskTurn& turn : task.turns) {
          const std::vector<std::string> ps = paragraphs_of(turn.text);
          seen.insert(seen.end(), ps.begin(), ps.end() - 1);
          const std::string question = ps.back();
          CHECK(turn.type == std::string(t::task_kind_name(kind)) + "@" + t::length_label(length));
          CHECK(derive(parse(seen), question) == turn.answer);
          CHECK(turn.answer.size() == 4);
        }
        const Stated s = parse(seen);
        switch (kind) {
          case t::TaskKind::Needle: CHECK(s.codes.size() == 1); break;
          case t::TaskKind::MultiKey: {
            CHECK(s.codes.size() == static_cast<size_t>(o.keys));
            std::set<std::string> objects, values;
            for (const auto& [key, vals] : s.codes) {
              objects.insert(key.substr(key.rfind(' ') + 1));  // the distractors differ by colour only
              values.insert(vals.begin(), vals.end());
            }
            CHECK(objects.size() == 1);
            CHECK(values.size() == static_cast<size_t>(o.keys));
            break;
          }
          case t::TaskKind::MultiTurn:
            REQUIRE(task.turns.size() == 2);
            CHECK(s.codes.size() == 2);
            CHECK(parse(paragraphs_of(task.turns[1].text)).codes.empty());  // turn 2 asks about turn 1's fact
            break;
          case t::TaskKind::VariableTracking: CHECK(s.let_value.size() + s.let_name.size() == 2); break;
        }
      }
}

TEST_CASE("tasks: lengths in the model's own tokens, depths where they are said to be", "[tasks]") {
  const t::TokenCounter count = real_counter();
  t::TaskOptions o;
  for (t::TaskKind kind : {t::TaskKind::Needle, t::TaskKind::MultiKey})
    for (int64_t length : {1024, 2048, 4096})
      for (int64_t i = 0; i < 5; ++i) {
        const t::LongContextTask task = t::make_long_context_task(corpus(), count, kind, length, i, o);
        INFO(task.id << ": " << task.tokens << " tokens");
        int64_t measured = 0;
        for (const auto& turn : task.turns) measured += count(turn.text);
        CHECK(measured == task.tokens);
        CHECK(std::abs(task.tokens - length) <= length / 20 + 16);  // within 5%
        // The asked fact (the question's key) sits at the stated depth of the haystack.
        const std::vector<std::string> ps = paragraphs_of(task.turns[0].text);
        const std::string question = ps.back().substr(std::string("What is the secret number of ").size());
        const std::string key = question.substr(0, question.find('?'));
        const std::string fact = "The secret number of " + key + " is " + task.turns[0].answer + ".";
        size_t at = 0, haystack = 0;
        for (size_t k = 1; k + 1 < ps.size(); ++k) {  // between the intro and the question
          if (ps[k] == fact) at = haystack;
          if (parse({ps[k]}).fact_paragraphs.empty()) ++haystack;
        }
        REQUIRE(task.depths.size() == 1);
        CHECK(task.depths[0] == Approx(std::vector<double>{0.1, 0.3, 0.5, 0.7, 0.9}[i % 5]));
        CHECK(static_cast<double>(at) / static_cast<double>(haystack) == Approx(task.depths[0]).margin(0.1));
      }
}

TEST_CASE("tasks: haystacks come from their split's documents only; same key, same task", "[tasks]") {
  const t::TokenCounter count = real_counter();
  std::map<std::string, const t::HaystackDocument*> by_id;
  for (const auto& d : corpus()) by_id[d.id] = &d;
  for (const std::string split : {"train", "test"}) {
    t::TaskOptions o;
    o.split = split;
    for (t::TaskKind kind : t::kQuestionTaskKinds) {
      const t::LongContextTask task = t::make_long_context_task(corpus(), count, kind, 2048, 3, o);
      INFO(task.id << " " << split);
      for (const std::string& id : task.documents) CHECK(by_id.at(id)->split == split);
      for (const auto& turn : task.turns) {
        const std::vector<std::string> ps = paragraphs_of(turn.text);
        for (size_t k = 1; k + 1 < ps.size(); ++k) {
          if (!parse({ps[k]}).fact_paragraphs.empty() || ps[k] == "Here is more text.") continue;
          bool found = false;
          for (const std::string& id : task.documents) found = found || by_id.at(id)->text.find(ps[k]) != std::string::npos;
          CHECK(found);
        }
      }
      CHECK(t::task_json(task, o) == t::task_json(t::make_long_context_task(corpus(), count, kind, 2048, 3, o), o));
      CHECK(task.turns[0].text != t::make_long_context_task(corpus(), count, kind, 2048, 4, o).turns[0].text);
      t::TaskOptions other = o;
      other.seed = 1;
      CHECK(task.turns[0].text != t::make_long_context_task(corpus(), count, kind, 2048, 3, other).turns[0].text);
    }
  }
}

TEST_CASE("tasks: bad corpora and options are refused by name", "[tasks]") {
  ScratchDir dir("tasks");
  auto write = [&](const std::string& name, const std::string& text) {
    write_text(dir.file(name), text);
    return dir.file(name);
  };
  auto refuses = [](const std::string& path, const std::string& part) {
    try {
      t::read_haystack_corpus(path);
      FAIL("accepted " << path);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(part));
    }
  };
  refuses(dir.file("none.jsonl"), "none.jsonl");
  const std::string good = R"({"id": "a", "kind": "man", "split": "test", "text": "Some text."})";
  refuses(write("split.jsonl", good + "\n" + R"({"id": "b", "kind": "man", "split": "dev", "text": "x"})"),
          "split.jsonl:2: split must be 'train' or 'test'");
  refuses(write("twice.jsonl", good + "\n" + good), "twice.jsonl:2: document id 'a' appears twice");
  refuses(write("field.jsonl", R"({"id": "a", "split": "test", "text": "x"})"), "field 'kind'");
  refuses(write("empty.jsonl", R"({"id": "a", "kind": "man", "split": "test", "text": ""})"), "has no text");
  refuses(write("broken.jsonl", good + "\n{\"id\": "), "broken.jsonl:2: malformed JSON");
  refuses(write("nothing.jsonl", "\n"), "no documents");

  const auto docs = t::read_haystack_corpus(write("one.jsonl", good));
  const t::TokenCounter words = [](std::string_view s) { return static_cast<int64_t>(s.size() / 4 + 1); };
  t::TaskOptions o;
  o.split = "train";
  CHECK_THROWS_WITH(t::make_long_context_task(docs, words, t::TaskKind::Needle, 1024, 0, o),
                    Catch::Contains("no 'train' document"));
  o.split = "test";
  CHECK_THROWS_WITH(t::make_long_context_task(docs, words, t::TaskKind::Needle, 100, 0, o),
                    Catch::Contains("at least 256"));
  o.keys = 9;
  CHECK_THROWS_WITH(t::make_long_context_task(docs, words, t::TaskKind::MultiKey, 1024, 0, o),
                    Catch::Contains("keys must be in 2..8"));
  // A one-document corpus still fills the length (the document is reused from random places; the
  // crude counter is not additive over paragraphs, hence the wide range).
  o.keys = 4;
  const t::LongContextTask task = t::make_long_context_task(docs, words, t::TaskKind::Needle, 1024, 0, o);
  CHECK(task.tokens > 1024 * 7 / 10);
  CHECK(task.tokens < 1024 * 21 / 20);
}

TEST_CASE("tasks: training forms: whole-sentence answers, plain text lines", "[tasks]") {
  const t::TokenCounter count = real_counter();
  t::TaskOptions o;
  o.split = "train";
  t::TaskOptions sentences = o;
  sentences.sentence_answers = true;
  for (t::TaskKind kind : t::kQuestionTaskKinds) {
    const t::LongContextTask value = t::make_long_context_task(corpus(), count, kind, 1024, 2, o);
    const t::LongContextTask sentence = t::make_long_context_task(corpus(), count, kind, 1024, 2, sentences);
    INFO(value.id);
    REQUIRE(value.turns.size() == sentence.turns.size());
    std::string all;  // the conversation's text: a later turn may ask about an earlier fact
    for (const auto& turn : value.turns) all += turn.text;
    for (size_t k = 0; k < value.turns.size(); ++k) {
      CHECK(value.turns[k].text == sentence.turns[k].text);  // the same task, only the answer's form differs
      const std::string& a = sentence.turns[k].answer;
      CHECK(a.size() > value.turns[k].answer.size() + 10);
      CHECK(a.find(value.turns[k].answer + ".") == a.size() - 5);  // "... 4821."
      if (kind != t::TaskKind::VariableTracking) CHECK(all.find(a) != std::string::npos);
    }
  }
  const t::LongContextTask text = t::make_long_context_task(corpus(), count, t::TaskKind::Text, 1024, 0, o);
  const nlohmann::json j = nlohmann::json::parse(t::task_json(text, o));
  CHECK(j.at("text").get<std::string>() == text.turns[0].text);
  CHECK_FALSE(j.contains("turns"));
  CHECK(j.at("task").at("kind") == "text");
  CHECK(std::abs(text.tokens - 1024) <= 1024 / 20);
}
